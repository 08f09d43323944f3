// Package chart draws small bar charts as inline SVG for pages that carry
// no scripts and may forbid inline styles: the operator console's status
// page (package console) and the HTML reports of the launch gate
// (harness/gate) and the checker (harness/check). Colours and fonts are SVG presentation attributes, so a
// page's stylesheet may override them but need not supply them, and a
// Content-Security-Policy without style-src does not blank the chart.
package chart

import (
	"fmt"
	"html/template"
	"strings"
)

// Bar is one bar of a chart.
type Bar struct {
	// Label is written under the bar. It may come from data: it is
	// escaped.
	Label string
	// Count is the bar's value; the tallest bar fills the chart's height
	// and the others are proportional to it.
	Count uint64
	// Alert draws the bar in red (class "bar over"), e.g. a latency
	// bucket above a limit.
	Alert bool
	// Mark, when not empty, draws a dashed vertical line (class "limit")
	// at the bar's right edge, labelled with Mark.
	Mark string
}

// Colours, as presentation attributes.
const (
	barFill    = "#4a78b5"
	alertFill  = "#c0504d"
	textFill   = "#444"
	markStroke = "#b3261e"
	background = "#fafafa"
)

// Geometry, in pixels.
const (
	height   = 260
	top      = 24 // room for the counts above the bars
	bottom   = 50 // room for the labels
	left     = 50 // room for the axis' numbers
	right    = 10
	maxWidth = 900
	minWidth = 320
	perBar   = 70 // a bar's slot, at most: fewer bars leave room on the right
	rotateAt = 60 // slots narrower than this get their labels rotated
)

// Bars renders bars as one <svg> element, left to right, titled title
// (its accessible name and tooltip). Each bar is a <rect class="bar">
// carrying data-label and data-count, with its count written above it
// when it is not zero; the axis shows 0 and the tallest count. All bars
// zero draws an empty axis. The chart is as wide as its bars need, at
// most 900 pixels. The result holds no script, no style attribute and
// no external reference; every text from title and labels is escaped.
func Bars(title string, bars []Bar) template.HTML {
	var peak uint64
	for _, b := range bars {
		peak = max(peak, b.Count)
	}
	width := min(max(left+right+perBar*len(bars), minWidth), maxWidth)
	slot := min(float64(width-left-right)/float64(max(len(bars), 1)), perBar)
	base := height - bottom
	esc := template.HTMLEscapeString
	var b strings.Builder
	// No xmlns: inline in an HTML page the parser puts <svg> in the SVG
	// namespace itself, and a self-contained report names no URL.
	fmt.Fprintf(&b, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" font-family="system-ui, sans-serif" font-size="10">`,
		width, height, width, height, esc(title))
	fmt.Fprintf(&b, `<title>%s</title>`, esc(title))
	fmt.Fprintf(&b, `<rect class="background" x="0" y="0" width="%d" height="%d" fill="%s"/>`, width, height, background)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, left, base, width-right, base)
	fmt.Fprintf(&b, `<text x="4" y="%d" fill="%s">%d</text><text x="4" y="%d" fill="%s">0</text>`, top+4, textFill, peak, base, textFill)
	for i, bar := range bars {
		x := float64(left) + float64(i)*slot
		h := 0.0
		if peak > 0 {
			h = float64(base-top) * float64(bar.Count) / float64(peak)
		}
		class, fill := "bar", barFill
		if bar.Alert {
			class, fill = "bar over", alertFill
		}
		label := esc(bar.Label)
		fmt.Fprintf(&b, `<rect class="%s" data-label="%s" data-count="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d</title></rect>`,
			class, label, bar.Count, x+1, float64(base)-h, max(slot-2, 1), h, fill, label, bar.Count)
		mid := x + slot/2
		if bar.Count > 0 {
			fmt.Fprintf(&b, `<text class="count" x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%d</text>`, mid, float64(base)-h-3, textFill, bar.Count)
		}
		if slot < rotateAt {
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d" transform="rotate(45 %.1f %d)" fill="%s">%s</text>`,
				mid, base+12, mid, base+12, textFill, label)
		} else {
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`, mid, base+16, textFill, label)
		}
		if bar.Mark != "" {
			lx := x + slot
			fmt.Fprintf(&b, `<line class="limit" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4 3"/><text x="%.1f" y="%d" fill="%s">%s</text>`,
				lx, top, lx, base, markStroke, lx+3, top+10, markStroke, esc(bar.Mark))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and escaped text only
}

// Seconds renders a duration in seconds briefly for a label: "200µs",
// "2.5ms", "1.64s".
func Seconds(s float64) string {
	switch {
	case s < 0.001:
		return fmt.Sprintf("%.3gµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3gms", s*1e3)
	}
	return fmt.Sprintf("%.3gs", s)
}
