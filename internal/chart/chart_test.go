package chart

import (
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"
)

// rect is one bar as the SVG draws it.
type rect struct {
	class, label string
	count        uint64
	height       float64
}

// parse reads the SVG as XML (it must be well-formed) and returns its
// bars, its text and whether it holds anything a strict page refuses.
func parse(t *testing.T, svg string) ([]rect, string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var bars []rect
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			switch tok.Name.Local {
			case "script", "style", "image", "use", "a", "foreignObject":
				t.Errorf("element <%s> in %s", tok.Name.Local, svg)
			}
			attrs := map[string]string{}
			for _, a := range tok.Attr {
				n := strings.ToLower(a.Name.Local)
				if n == "style" || n == "href" || strings.HasPrefix(n, "on") {
					t.Errorf("attribute %s=%q in %s", n, a.Value, svg)
				}
				attrs[n] = a.Value
			}
			if tok.Name.Local == "rect" && strings.HasPrefix(attrs["class"], "bar") {
				n, err1 := strconv.ParseUint(attrs["data-count"], 10, 64)
				h, err2 := strconv.ParseFloat(attrs["height"], 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("bar %v", attrs)
				}
				bars = append(bars, rect{attrs["class"], attrs["data-label"], n, h})
			}
		case xml.CharData:
			text.Write(tok)
		}
	}
	return bars, text.String()
}

func TestBarsProportional(t *testing.T) {
	t.Parallel()
	in := []Bar{{Label: "a", Count: 10}, {Label: "b", Count: 5}, {Label: "c", Count: 0}, {Label: "d", Count: 1, Alert: true, Mark: "limit 5ms"}}
	svg := string(Bars("latency", Axes{X: "bucket", Y: "count"}, in))
	bars, text := parse(t, svg)
	if len(bars) != len(in) {
		t.Fatalf("%d bars; want %d", len(bars), len(in))
	}
	full := bars[0].height
	if full <= 0 {
		t.Fatalf("the tallest bar has height %g", full)
	}
	for i, b := range bars {
		if b.label != in[i].Label || b.count != in[i].Count {
			t.Errorf("bar %d: %+v; want %+v", i, b, in[i])
		}
		if want := full * float64(in[i].Count) / 10; b.height < want-0.11 || b.height > want+0.11 {
			t.Errorf("bar %d (count %d) has height %g; want %g", i, in[i].Count, b.height, want)
		}
	}
	if bars[3].class != "bar over" || bars[0].class != "bar" {
		t.Errorf("classes %q, %q; want the alert bar alone to be \"bar over\"", bars[0].class, bars[3].class)
	}
	for _, want := range []string{"latency", "limit 5ms"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chart's text lacks %q: %s", want, text)
		}
	}
	if strings.Count(svg, `class="limit"`) != 1 {
		t.Errorf("want one limit line: %s", svg)
	}
}

func TestBarsZero(t *testing.T) {
	t.Parallel()
	for _, in := range [][]Bar{nil, {{Label: "< 1 min"}, {Label: "≥ 6 h"}}} {
		svg := string(Bars("none", Axes{}, in))
		bars, _ := parse(t, svg)
		if len(bars) != len(in) {
			t.Fatalf("%d bars; want %d", len(bars), len(in))
		}
		for _, b := range bars {
			if b.count != 0 || b.height != 0 {
				t.Errorf("a zero bar drawn as %+v", b)
			}
		}
		if strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
			t.Errorf("zero counts give %s", svg)
		}
	}
}

func TestBarsEscapes(t *testing.T) {
	t.Parallel()
	hostile := `"><script>alert(1)</script><rect onload="x" style="a`
	svg := string(Bars(hostile, Axes{X: hostile, Y: hostile}, []Bar{{Label: hostile, Count: 3, Mark: hostile}}))
	if strings.Contains(svg, "<script") || strings.Count(svg, "<rect") != 2 || strings.Contains(svg, `onload="`) {
		t.Fatalf("hostile text not escaped: %s", svg)
	}
	bars, text := parse(t, svg)
	if len(bars) != 1 || bars[0].label != hostile {
		t.Errorf("bars %+v; want one labelled with the hostile text, intact", bars)
	}
	if !strings.Contains(text, hostile) {
		t.Errorf("the chart's text does not show the hostile label as text: %q", text)
	}
}

func TestSeconds(t *testing.T) {
	t.Parallel()
	for s, want := range map[float64]string{0.0002: "200µs", 0.0025: "2.5ms", 1.6384: "1.64s"} {
		if got := Seconds(s); got != want {
			t.Errorf("Seconds(%g) = %q; want %q", s, got, want)
		}
	}
}
