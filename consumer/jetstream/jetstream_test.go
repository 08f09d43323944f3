package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/orderstest"
	cjs "github.com/idemkit/idem/consumer/jetstream"
	"github.com/idemkit/idem/internal/docprogram"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/natstest"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Environment of the child consumer process (TestChildConsumer).
const (
	childEnv    = "IDEM_TEST_JS_CHILD" // the NATS URL
	childDSNEnv = "IDEM_TEST_JS_DSN"
)

// fixture is a JetStream server with the orders and dead-letter streams,
// the durable consumer "ingest", and a registry with the orders table.
type fixture struct {
	nats  *natstest.Server
	js    js.JetStream
	cons  js.Consumer
	store registry.Store
	dsn   string
}

func newFixture(t *testing.T, url, dsn string) *fixture {
	t.Helper()
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f := &fixture{dsn: dsn}
	if f.js, err = js.New(nc); err != nil {
		t.Fatal(err)
	}
	for name, subject := range map[string]string{"ORDERS": "orders.>", "DEAD": "dead.orders"} {
		if _, err := f.js.CreateOrUpdateStream(ctx, js.StreamConfig{Name: name, Subjects: []string{subject}}); err != nil {
			t.Fatal(err)
		}
	}
	if f.cons, err = f.js.CreateOrUpdateConsumer(ctx, "ORDERS", js.ConsumerConfig{Durable: "ingest", AckPolicy: js.AckExplicitPolicy,
		AckWait: 2 * time.Second, MaxAckPending: 1000}); err != nil {
		t.Fatal(err)
	}
	f.store = orderstest.Open(t, dsn)
	return f
}

// processor writes an order per message (orderstest.Processor);
// replays counts the replays; fail makes every message fail.
func (f *fixture) processor(replays *atomic.Int64, fail bool) *consumer.Processor {
	var always func(consumer.Message) bool
	if fail {
		always = orderstest.Always
	}
	return orderstest.Processor(f.store, replays, always)
}

// consume runs n Consume loops until the test ends.
func (f *fixture) consume(t *testing.T, p *consumer.Processor, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { cjs.Consume(ctx, f.cons, p, cjs.Config{JetStream: f.js, DeadLetterSubject: "dead.orders"}) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// orders counts the business rows.
func (f *fixture) orders(t *testing.T) int { return orderstest.Count(t, f.store) }

// drained waits until the consumer has every message acknowledged or
// terminated (nothing pending, nothing awaiting an ack).
func (f *fixture) drained(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		info, err := f.cons.Info(context.Background())
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not drain within %v: %+v %v", within, info, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the consumer's state
	}
}

// publish publishes one order with key as its Idempotency-Key.
func (f *fixture) publish(t *testing.T, key, body string) {
	t.Helper()
	msg := &nats.Msg{Subject: "orders.new", Data: []byte(body), Header: nats.Header{cjs.KeyHeader: {key}}}
	if _, err := f.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// TestJetStreamDuplicates: 10,000 messages of which 1,000 are duplicate
// publishes of earlier ones (the same key and body), consumed by four
// concurrent loops, give one order per key: 9,000 orders, and every
// duplicate counted as a replay. threat:consumer-redelivery
func TestJetStreamDuplicates(t *testing.T) {
	srv := natstest.Start(t)
	f := newFixture(t, srv.URL(), pgtest.DSN(t))
	ctx := context.Background()
	for i := range 10_000 {
		k := i
		if i%10 == 9 {
			k = i - 5 // a duplicate publish of an earlier message
		}
		msg := &nats.Msg{Subject: "orders.new", Data: fmt.Appendf(nil, `{"n":%d}`, k), Header: nats.Header{cjs.KeyHeader: {fmt.Sprintf("order-%d", k)}}}
		if _, err := f.js.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishing did not complete")
	}
	var replays atomic.Int64
	f.consume(t, f.processor(&replays, false), 4)
	f.drained(t, 5*time.Minute)
	if n := f.orders(t); n != 9_000 {
		t.Errorf("%d orders from 9,000 keys, want 9,000", n)
	}
	if r := replays.Load(); r < 1_000 {
		t.Errorf("%d replays, want at least the 1,000 duplicates", r)
	}
	if info, err := f.js.Stream(ctx, "DEAD"); err != nil || info.CachedInfo().State.Msgs != 0 {
		t.Errorf("dead letters: %v", err)
	}
}

// TestJetStreamKillBetweenCommitAndAck: a consumer process SIGKILLed after
// its message's transaction committed and before its ack (the
// consumer-after-commit failpoint) leaves one order; the message is
// delivered again to another consumer, which answers it as a replay and
// acknowledges it: still one order. threat:consumer-redelivery
func TestJetStreamKillBetweenCommitAndAck(t *testing.T) {
	srv := natstest.Start(t)
	dsn := pgtest.DSN(t)
	f := newFixture(t, srv.URL(), dsn)
	f.publish(t, "order-1", `{"sku":"A"}`)
	child := exec.Command(os.Args[0], "-test.run=^TestChildConsumer$", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"="+srv.URL(), childDSNEnv+"="+dsn, failpoint.Env+"="+cjs.AfterCommit+"=kill")
	out, err := child.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child consumer was not killed at the failpoint: %v\n%s", err, out)
	}
	if n := f.orders(t); n != 1 {
		t.Fatalf("%d orders after the kill, want the committed 1", n)
	}
	var replays atomic.Int64
	f.consume(t, f.processor(&replays, false), 1)
	f.drained(t, time.Minute)
	if n, r := f.orders(t), replays.Load(); n != 1 || r != 1 {
		t.Errorf("after the redelivery: %d orders, %d replays; want 1 and 1", n, r)
	}
}

// TestChildConsumer is the consumer process TestJetStreamKillBetweenCommitAndAck
// starts; it does nothing in a normal run.
func TestChildConsumer(t *testing.T) {
	url := os.Getenv(childEnv)
	if url == "" {
		t.Skip("the child consumer of TestJetStreamKillBetweenCommitAndAck")
	}
	f := newFixture(t, url, os.Getenv(childDSNEnv))
	f.consume(t, f.processor(nil, false), 1)
	time.Sleep(time.Minute) // the failpoint kills this process first
	t.Fatal("the failpoint did not kill the child")
}

// TestJetStreamPoison: a message whose handler always fails is delivered
// MaxAttempts times, then published to the dead-letter stream with its
// body, key and the reason, and terminated; nothing of it is recorded.
func TestJetStreamPoison(t *testing.T) {
	srv := natstest.Start(t)
	f := newFixture(t, srv.URL(), "sqlite:"+t.TempDir()+"/orders.db")
	f.publish(t, "order-bad", `{"sku":"?"}`)
	f.consume(t, f.processor(nil, true), 1)
	f.drained(t, time.Minute)
	dead, err := f.js.CreateOrUpdateConsumer(context.Background(), "DEAD", js.ConsumerConfig{Durable: "inspect"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := dead.Next(js.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	h := msg.Headers()
	if string(msg.Data()) != `{"sku":"?"}` || h.Get(cjs.KeyHeader) != "order-bad" || h.Get(cjs.HeaderOriginalSubject) != "orders.new" || h.Get(cjs.HeaderDeadReason) == "" {
		t.Errorf("dead letter %q %v", msg.Data(), h)
	}
	if n := f.orders(t); n != 0 {
		t.Errorf("%d orders from a poison message, want 0", n)
	}
}

// TestConsumerDocProgram: the consumer program of docs/consumers.md,
// built in a fresh module and run against a throwaway NATS server,
// writes one order for a message published twice under one key.
func TestConsumerDocProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in a fresh module")
	}
	srv := natstest.Start(t)
	dir, bin := docprogram.Build(t, docprogram.Source(t, "docs/consumers.md", "<!-- consumer-program"))
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.URL())
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "consuming") {
		if time.Now().After(deadline) {
			t.Fatalf("the program did not start consuming:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the program's log line
	}
	f := newFixture(t, srv.URL(), "sqlite:"+filepath.Join(dir, "orders.db"))
	f.publish(t, "order-42", `{"sku":"A"}`)
	f.publish(t, "order-42", `{"sku":"A"}`)
	f.drained(t, time.Minute)
	if n := f.orders(t); n != 1 {
		t.Errorf("%d orders from one order published twice, want 1", n)
	}
}

// syncBuffer is a bytes.Buffer safe for a child's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
