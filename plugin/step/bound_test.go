package step

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// TestRunBoundedWhenAPIServerHangs: an apiserver that accepts connections and never answers
// must not hold a controller worker for longer than RunDeadline (ten Rollouts at this step
// would hold all ten default workers). The Event goes to the same hung server, in the
// background.
func TestRunBoundedWhenAPIServerHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	accepted := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			accepted++
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	cl, err := plugin.ClientsForConfig(&rest.Config{Host: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	client := func() (plugin.Clients, error) { return cl, nil }
	s := &Step{Client: client, Log: quietLog(), CreationWait: shortCreationWait, Events: plugin.NewAsyncEvents(&plugin.APIEvents{Client: client}, 8, quietLog())}
	start := time.Now()
	res, rerr := s.Run(fixtures.Rollout(curHash), stepCtx(`{"configMaps":["cfg-new"]}`))
	took := time.Since(start)
	if !rerr.HasError() || res.Phase != "" {
		t.Errorf("want an error result for the controller to retry, got phase %q %q err %v", res.Phase, res.Message, rerr)
	}
	if took > RunDeadline+2*time.Second {
		t.Errorf("Run held the worker for %s, more than the %s bound", took, RunDeadline)
	}
	mu.Lock()
	n := accepted
	mu.Unlock()
	if n == 0 {
		t.Fatal("no connection reached the hung listener: the check would pass by accident")
	}
	if !strings.Contains(rerr.ErrorString, "to find the one being rolled out") {
		t.Errorf("error %q does not say what it was doing", rerr.ErrorString)
	}
	t.Logf("Run returned after %s (bound %s) with %q; %d connections accepted", took.Round(time.Millisecond), RunDeadline, rerr.ErrorString, n)
}
