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
	"math"
	"strings"
	"unicode/utf8"
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
	height    = 230 // of the plot: counts, bars and the axis
	top       = 24  // room for the counts above the bars
	left      = 62  // room for the y-axis title and numbers
	right     = 10
	maxWidth  = 900
	minWidth  = 320
	perBar    = 70 // a bar's slot, at most: fewer bars leave room on the right
	fontSize  = 10
	charWidth = 6.5 // a generous estimate of a character's width at fontSize
	lineStep  = 14  // the least horizontal room of one upright label
	maxLabel  = 28  // longer labels are shortened (the whole in the bar's title)
	titleRoom = 18  // below the labels, for the x-axis title
)

// Axes names what a chart's axes measure, with units: X under the
// labels ("latency bucket, upper bound"), Y beside the numbers
// ("requests, count"). Empty: that axis has no title.
type Axes struct {
	X, Y string
}

// Bars renders bars as one <svg> element, left to right, titled title
// (its accessible name and tooltip), its axes titled by ax. Each bar is
// a <rect class="bar"> carrying data-label and data-count, with its
// count written above it when it is not zero; the y axis shows 0 and the
// tallest count. All bars zero draws an empty axis. The chart is as wide
// as its bars need, at most 900 pixels.
//
// Labels never overlap: they are written level when every one fits its
// bar's slot, else upright (rotated a quarter turn, as tall as the
// longest label needs), and when even upright labels would not fit
// side by side only every few bars is labelled; a label longer than 28
// characters is shortened with "…". Every bar's <title> keeps its whole
// label. The result holds no script, no style attribute and no external
// reference; every text from title, axes and labels is escaped.
func Bars(title string, ax Axes, bars []Bar) template.HTML {
	var peak uint64
	labels := make([]string, len(bars))
	longest := 0
	for i, b := range bars {
		peak = max(peak, b.Count)
		labels[i] = shorten(b.Label)
		longest = max(longest, utf8.RuneCountInString(labels[i]))
	}
	width := min(max(left+right+perBar*len(bars), minWidth), maxWidth)
	slot := min(float64(width-left-right)/float64(max(len(bars), 1)), perBar)
	level := float64(longest)*charWidth <= slot-4
	every := 1 // label every bar, or every few when upright ones would touch
	labelRoom := 22
	if !level {
		every = max(int(math.Ceil(lineStep/slot)), 1)
		labelRoom = int(float64(longest)*charWidth) + 10
	}
	base := height
	total := base + labelRoom + titleRoom
	esc := template.HTMLEscapeString
	var b strings.Builder
	// No xmlns: inline in an HTML page the parser puts <svg> in the SVG
	// namespace itself, and a self-contained report names no URL.
	fmt.Fprintf(&b, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" font-family="system-ui, sans-serif" font-size="%d">`,
		width, total, width, total, esc(title), fontSize)
	fmt.Fprintf(&b, `<title>%s</title>`, esc(title))
	fmt.Fprintf(&b, `<rect class="background" x="0" y="0" width="%d" height="%d" fill="%s"/>`, width, total, background)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`,
		left, base, width-right, base, left, top, left, base)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end" fill="%s">%d</text><text class="tick" x="%d" y="%d" text-anchor="end" fill="%s">0</text>`,
		left-4, top+4, textFill, peak, left-4, base, textFill)
	if ax.Y != "" {
		mid := (top + base) / 2
		fmt.Fprintf(&b, `<text class="axis-title y" x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle" fill="%s">%s</text>`,
			mid, mid, textFill, esc(ax.Y))
	}
	if ax.X != "" {
		fmt.Fprintf(&b, `<text class="axis-title x" x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`,
			float64(left+width-right)/2, total-5, textFill, esc(ax.X))
	}
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
		fmt.Fprintf(&b, `<rect class="%s" data-label="%s" data-count="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d</title></rect>`,
			class, esc(bar.Label), bar.Count, x+1, float64(base)-h, max(slot-2, 1), h, fill, esc(bar.Label), bar.Count)
		mid := x + slot/2
		if bar.Count > 0 {
			fmt.Fprintf(&b, `<text class="count" x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%d</text>`, mid, float64(base)-h-3, textFill, bar.Count)
		}
		switch {
		case level:
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`, mid, base+15, textFill, esc(labels[i]))
		case i%every == 0:
			// Upright, reading bottom to top, its end at the axis.
			y := base + 6
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d" transform="rotate(-90 %.1f %d)" text-anchor="end" dominant-baseline="middle" fill="%s">%s</text>`,
				mid, y, mid, y, textFill, esc(labels[i]))
		}
		if bar.Mark != "" {
			lx := x + slot
			fmt.Fprintf(&b, `<line class="limit" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4 3"/><text class="mark" x="%.1f" y="%d" fill="%s">%s</text>`,
				lx, top, lx, base, markStroke, lx+3, top+10, markStroke, esc(bar.Mark))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and escaped text only
}

// shorten cuts a label to maxLabel characters, ending in "…".
func shorten(s string) string {
	r := []rune(s)
	if len(r) <= maxLabel {
		return s
	}
	return string(r[:maxLabel-1]) + "…"
}

// Bucket renders the label of histogram bucket i of upper bounds bounds
// (seconds), the notation every chart uses: "≤ 10ms" for a bound, "> 1s"
// for the bucket past the last one (i == len(bounds)).
func Bucket(bounds []float64, i int) string {
	if i < len(bounds) {
		return "≤ " + Seconds(bounds[i])
	}
	if len(bounds) == 0 {
		return "all"
	}
	return "> " + Seconds(bounds[len(bounds)-1])
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
