package bench

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func BenchmarkControllerDiag(b *testing.B) {
	e := newCtlEnv(b)
	e.populate(b, 0, 2000, 5, 2)
	p := startCtl(b, e, "-leader-elect=false", "-dry-run")
	p.waitReady(b)
	p.waitAdded(b, 20000, time.Now(), "owner_references_would_add_total")
	time.Sleep(3 * time.Second)
	b.Logf("RSS %.1f MiB", ctlRSS(b, p.pid, "VmRSS"))
	m := p.scrape(b)
	for k, v := range m {
		if strings.HasPrefix(k, "go_memstats_heap") || strings.HasPrefix(k, "go_memstats_sys") || strings.HasPrefix(k, "go_memstats_stack") {
			b.Logf("%s %.1f MiB", k, v/1024/1024)
		}
	}
	resp, err := http.Get(strings.Replace(p.metricsURL, "/metrics", "/debug/pprof/heap", 1))
	if err != nil {
		b.Fatal(err)
	}
	f, _ := os.Create("/tmp/ctl-heap.pprof")
	io.Copy(f, resp.Body)
	f.Close()
}
