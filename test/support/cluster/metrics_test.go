package cluster

import (
	"strings"
	"testing"
)

// TestParseMetrics: samples are keyed as the text format writes them (what the tests look up).
func TestParseMetrics(t *testing.T) {
	const page = `# HELP x_total Things.
# TYPE x_total counter
x_total{kind="ConfigMap",namespace="a"} 2
x_total{kind="Secret",namespace="a"} 1
# TYPE leader gauge
leader 1
# TYPE reaction_seconds histogram
reaction_seconds_bucket{le="0.005"} 0
reaction_seconds_bucket{le="0.1"} 3
reaction_seconds_bucket{le="+Inf"} 4
reaction_seconds_sum 1.5
reaction_seconds_count 4
# TYPE q summary
q{quantile="0.5"} 0.2
q_sum 3
q_count 7
`
	m, err := ParseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`x_total{kind="ConfigMap",namespace="a"}`: 2, `x_total{kind="Secret",namespace="a"}`: 1, "leader": 1,
		`reaction_seconds_bucket{le="0.005"}`: 0, `reaction_seconds_bucket{le="0.1"}`: 3, `reaction_seconds_bucket{le="+Inf"}`: 4,
		"reaction_seconds_sum": 1.5, "reaction_seconds_count": 4, `q{quantile="0.5"}`: 0.2, "q_sum": 3, "q_count": 7,
	}
	if len(m) != len(want) {
		t.Errorf("got %d samples, want %d: %v", len(m), len(want), m)
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if got := Metric(m, "x_total", `kind="Secret"`, `namespace="a"`); got != 1 {
		t.Errorf("Metric = %v, want 1", got)
	}
	if got := SumMetric(m, "x_total", `namespace="a"`); got != 3 {
		t.Errorf("SumMetric = %v, want 3", got)
	}
}
