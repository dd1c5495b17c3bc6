package cluster

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeMetrics GETs a Prometheus /metrics endpoint (the controller mode's, say) and parses it
// with ParseMetrics.
func ScrapeMetrics(url string, timeout time.Duration) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, errors.New(resp.Status))
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads the Prometheus text format into sample → value, each sample keyed as the
// text format writes it: `name` or `name{a="x",b="y"}` (labels in exposition order; histogram
// samples as name_bucket{…,le="…"}, name_sum and name_count; summaries likewise with
// quantile). Tests look samples up by these keys (Metric, SumMetric), so that a test reads
// like the /metrics page it checks.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			add := func(suffix string, v float64, extra ...string) {
				out[sampleKey(name+suffix, m.GetLabel(), extra...)] = v
			}
			switch {
			case m.Counter != nil:
				add("", m.GetCounter().GetValue())
			case m.Gauge != nil:
				add("", m.GetGauge().GetValue())
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add("_bucket", float64(b.GetCumulativeCount()), "le", formatFloat(b.GetUpperBound()))
				}
				add("_sum", h.GetSampleSum())
				add("_count", float64(h.GetSampleCount()))
			case m.Summary != nil:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					add("", q.GetValue(), "quantile", formatFloat(q.GetQuantile()))
				}
				add("_sum", s.GetSampleSum())
				add("_count", float64(s.GetSampleCount()))
			default:
				add("", m.GetUntyped().GetValue())
			}
		}
	}
	return out, nil
}

var labelValueEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// sampleKey renders name{labels} as the text format does; extra is one more name, value pair
// (le, quantile), written last.
func sampleKey(name string, labels []*dto.LabelPair, extra ...string) string {
	var parts []string
	for _, l := range labels {
		parts = append(parts, l.GetName()+`="`+labelValueEscaper.Replace(l.GetValue())+`"`)
	}
	if len(extra) == 2 {
		parts = append(parts, extra[0]+`="`+extra[1]+`"`)
	}
	if len(parts) == 0 {
		return name
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// formatFloat writes a bucket bound or quantile as the text format does.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Metric returns one sample of ParseMetrics' result (0 when absent):
// Metric(m, "x_total", `kind="ConfigMap"`).
func Metric(m map[string]float64, name string, labels ...string) float64 {
	if len(labels) == 0 {
		return m[name]
	}
	return m[name+"{"+strings.Join(labels, ",")+"}"]
}

// SumMetric adds every sample of a metric whose labels contain all the given label pairs
// (`kind="Secret"`).
func SumMetric(m map[string]float64, name string, labels ...string) float64 {
	total := 0.0
	for k, v := range m {
		base, rest, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if ok {
			total += v
		}
	}
	return total
}
