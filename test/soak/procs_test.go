package soak

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// Leader election of the controller mode: short, so that a SIGKILLed leader is replaced
// within seconds (lease > renew > 1.2 × retry).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
)

// replica is one of the controller mode's replicas: a supervisor restarts its process when
// it exits (a leader that cannot renew exits 1; SIGKILL), as the kubelet restarts a pod.
type replica struct {
	name    string
	dir     string
	bin     string
	args    []string
	logPath string

	mu       sync.Mutex
	proc     *cluster.ControllerProcess
	starts   int
	exits    []int // exit codes seen (-1: signal)
	stopping bool
}

func (r *replica) launch() error {
	p, err := cluster.LaunchController(r.bin, r.name, r.logPath, nil, r.args...)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.proc = p
	r.starts++
	r.mu.Unlock()
	return nil
}

// supervise restarts the process 1 s after it exits, until stop.
func (r *replica) supervise(stop <-chan struct{}) {
	for {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		select {
		case <-stop:
			return
		case <-p.Exited():
		}
		r.mu.Lock()
		r.exits = append(r.exits, p.ExitCode())
		stopping := r.stopping
		r.mu.Unlock()
		if stopping {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
		for r.launch() != nil {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

func (r *replica) current() *cluster.ControllerProcess {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// kill sends SIGKILL to the running process (the supervisor restarts it).
func (r *replica) kill() {
	if p := r.current(); p != nil {
		p.Kill()
	}
}

// shutdown stops the process for good (SIGTERM, SIGKILL after 10 s).
func (r *replica) shutdown() {
	r.mu.Lock()
	r.stopping = true
	p := r.proc
	r.mu.Unlock()
	p.Stop()
}

// scrape reads /metrics of the running process as "name{labels}" → value.
func (r *replica) scrape() (map[string]float64, error) {
	p := r.current()
	if p == nil || !p.Running() {
		return nil, fmt.Errorf("%s not running", r.name)
	}
	return cluster.ScrapeMetrics(p.MetricsURL, time.Second)
}

const metricPrefix = "configmap_attacher_controller_"

// perNamespace returns a gauge's samples by their namespace label.
func perNamespace(m map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		base, rest, _ := strings.Cut(k, "{")
		if base != metricPrefix+name {
			continue
		}
		_, after, ok := strings.Cut(rest, `namespace="`)
		if !ok {
			continue
		}
		ns, _, _ := strings.Cut(after, `"`)
		out[ns] += v
	}
	return out
}
