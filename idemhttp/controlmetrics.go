package idemhttp

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/registry"
)

var (
	storeUpDesc = prometheus.NewDesc("idem_store_up",
		"1 when the registry answered the scrape's read of its control row within two seconds, 0 when it did not (storage trouble: requests get 503 STORE_UNAVAILABLE).", nil, nil)
	drainingDesc = prometheus.NewDesc("idem_draining",
		"1 while the registry drains (idem drain on): new operations are refused 503 DRAINING.", nil, nil)
	drainingSecondsDesc = prometheus.NewDesc("idem_draining_seconds",
		"While the registry drains, seconds since its control row last changed (the drain, or a later epoch bump: a lower bound on the drain's length); 0 when not draining.", nil, nil)
	writerEpochDesc = prometheus.NewDesc("idem_writer_epoch",
		"The registry's writer epoch (idem epoch): the oldest epoch that may still accept and commit operations.", nil, nil)
	fencedDesc = prometheus.NewDesc("idem_writer_fenced",
		"1 when this server's writer epoch is older than the registry's (an idem epoch bump fenced it): it refuses new operations 503 WRITER_FENCED.", nil, nil)
	fencedSecondsDesc = prometheus.NewDesc("idem_writer_fenced_seconds",
		"While this server is fenced, seconds since the registry's control row last changed (a lower bound on how long it has been fenced); 0 when not fenced.", nil, nil)
)

// controlCollector reads the registry's control row at scrape time.
type controlCollector struct {
	store registry.Controller
	epoch int64
	now   func() time.Time
}

// NewControlCollector returns a collector of the registry's control row
// (registry.Controller) as a server writing at writer epoch epoch sees it:
//
//	idem_store_up               1 when the control row was read within two seconds, else 0
//	idem_draining               1 while the registry drains (idem drain on)
//	idem_draining_seconds       while draining, seconds since the control row last changed; 0 when not
//	idem_writer_epoch           the registry's writer epoch
//	idem_writer_fenced          1 when epoch is older than the registry's
//	idem_writer_fenced_seconds  while fenced, seconds since the control row last changed; 0 when not
//
// Each scrape runs one query (Controller.Control), bounded by two
// seconds. When it fails, idem_store_up is 0 and the other five are left
// out rather than reported as zero. The two durations are lower bounds:
// the row's UpdatedAt moves at every drain and bump. Safe for concurrent
// use.
func NewControlCollector(store registry.Controller, epoch int64) prometheus.Collector {
	return &controlCollector{store: store, epoch: epoch, now: time.Now}
}

func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{storeUpDesc, drainingDesc, drainingSecondsDesc, writerEpochDesc, fencedDesc, fencedSecondsDesc} {
		ch <- d
	}
}

func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ctl, err := c.store.Control(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 0)
		return
	}
	since := max(0, c.now().Sub(ctl.UpdatedAt).Seconds())
	draining, fenced := flag(ctl.Draining), flag(ctl.WriterEpoch > c.epoch)
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(drainingDesc, prometheus.GaugeValue, draining)
	ch <- prometheus.MustNewConstMetric(drainingSecondsDesc, prometheus.GaugeValue, draining*since)
	ch <- prometheus.MustNewConstMetric(writerEpochDesc, prometheus.GaugeValue, float64(ctl.WriterEpoch))
	ch <- prometheus.MustNewConstMetric(fencedDesc, prometheus.GaugeValue, fenced)
	ch <- prometheus.MustNewConstMetric(fencedSecondsDesc, prometheus.GaugeValue, fenced*since)
}

// flag is 1 for true and 0 for false.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// NewStoreUpCollector returns a collector of idem_store_up alone, read as
// NewControlCollector reads it (one Controller.Control per scrape,
// bounded by two seconds), for a process that accepts no operations and
// so has no writer epoch or drain of its own to report: idem relay. Its
// metric is the one the IdemStoreUnavailable alert reads. Never register
// it beside a NewControlCollector: both describe idem_store_up. Safe for
// concurrent use.
func NewStoreUpCollector(store registry.Controller) prometheus.Collector {
	return storeUpCollector{store: store}
}

type storeUpCollector struct{ store registry.Controller }

func (c storeUpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- storeUpDesc }

func (c storeUpCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.store.Control(ctx)
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, flag(err == nil))
}
