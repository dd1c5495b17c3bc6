package doctor

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metricPrefix is what every metric of the controller mode starts with
// (plugin/controller.MetricPrefix; not imported, so that doctor does not link the controller).
const metricPrefix = "configmap_attacher_controller_"

// checkLease: the controller's Lease has a holder whose renewTime + leaseDuration is in the
// future; else no replica is leading and nothing is attached.
func (d *Doctor) checkLease(ctx context.Context, r *Report) {
	ns, name := d.leaseNamespace(), d.Opts.LeaseName
	subject := "Lease " + ns + "/" + name
	cctx, cancel := d.call(ctx)
	l, err := d.Kube.CoordinationV1().Leases(ns).Get(cctx, name, metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		r.problem(Error, "controller/lease", subject, "start the controller (its pod's log says why it is not leading), or pass -leader-election-namespace and -leader-election-id as the controller has them (chart: the release namespace and full name)",
			"not found: no controller has ever led here")
		return
	}
	if err != nil {
		r.problem(Error, "controller/lease", subject, "grant the identity running doctor get on leases.coordination.k8s.io in "+ns, "cannot read it: %v", err)
		return
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		r.problem(Error, "controller/lease", subject, "check that a controller replica is running and ready (kubectl -n "+ns+" logs deploy/...); a clean shutdown releases the Lease",
			"has no holder: no replica is leading, nothing is attached")
		return
	}
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	if now := d.now(); !expires.After(now) {
		r.problem(Error, "controller/lease", subject, "the leader cannot renew: check its pod (a crash, a network partition, or RBAC update on leases) and its log",
			"held by %s but expired %s ago (renewed %s, duration %ds): no replica is leading", holder,
			now.Sub(expires).Round(time.Second), l.Spec.RenewTime.UTC().Format(time.RFC3339), *l.Spec.LeaseDurationSeconds)
		return
	}
	r.ok("controller/lease", subject, "held by %s, renewed %s", holder, l.Spec.RenewTime.UTC().Format(time.RFC3339))
}

func (d *Doctor) inCluster() bool {
	if d.Opts.InCluster != nil {
		return d.Opts.InCluster()
	}
	return inCluster()
}

// svcPort is the port of a discovered metrics URL.
func svcPort(u string) string {
	p, err := neturl.Parse(u)
	if err != nil {
		return ""
	}
	return p.Port()
}

// checkMetrics: -metrics-url answers 200 with the controller's metrics.
func (d *Doctor) checkMetrics(ctx context.Context, r *Report) {
	url := d.Opts.MetricsURL
	if url == "" {
		subject := "metrics endpoint"
		if d.Opts.Discover {
			subject = "metrics of the controller in " + d.Opts.ControllerNamespace
		}
		r.problem(Warning, "controller/metrics", subject, "pass -metrics-url, e.g. http://<release>-metrics.<namespace>.svc:8080/metrics (the chart's metrics.enabled creates that Service)",
			"not checked: no -metrics-url, and no Service of the install reaches its -metrics-addr")
		return
	}
	if svc := d.Opts.metricsService; svc != "" && !d.inCluster() {
		// A Service's DNS name resolves only in the cluster; doctor does not proxy through the
		// apiserver, which would need get on services/proxy.
		r.problem(Warning, "controller/metrics", "Service "+d.Opts.ControllerNamespace+"/"+svc,
			fmt.Sprintf("run doctor in the cluster (helm test), or kubectl -n %s port-forward svc/%s 8080:%s and pass -metrics-url http://127.0.0.1:8080/metrics", d.Opts.ControllerNamespace, svc, svcPort(url)),
			"found, not fetched: doctor runs outside the cluster")
		return
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		r.problem(Error, "controller/metrics", url, "pass an http(s) URL of the controller's /metrics", "-metrics-url: %v", err)
		return
	}
	hc := d.Opts.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		r.problem(Error, "controller/metrics", url, "check that the controller runs and its metrics Service selects its pods (metrics.enabled in the chart)", "does not answer: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.problem(Error, "controller/metrics", url, "point -metrics-url at the controller's -metrics-addr, path /metrics", "answered %s", resp.Status)
		return
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), metricPrefix) {
			found++
		}
	}
	if err := sc.Err(); err != nil {
		r.problem(Error, "controller/metrics", url, "check the endpoint", "reading the answer: %v", err)
		return
	}
	if found == 0 {
		r.problem(Error, "controller/metrics", url, "point -metrics-url at configmap-attacher controller's -metrics-addr, not another process",
			"answered 200 without a %s* series: not the configmap-attacher controller", metricPrefix)
		return
	}
	r.ok("controller/metrics", url, "200 with %s", fmt.Sprintf("%d %s* series", found, metricPrefix))
}
