package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/internal/orderstest"
	"github.com/idemkit/idem/consumer/rabbitmq"
	"github.com/idemkit/idem/internal/failpoint"
	"github.com/idemkit/idem/internal/pgtest"
	"github.com/idemkit/idem/internal/rabbittest"
	"github.com/idemkit/idem/registry"
)

func TestMain(m *testing.M) { pgtest.Main(rabbittest.Runner{M: m}) }

// Environment of the child consumer process (TestChildConsumer).
const (
	childURLEnv   = "IDEM_TEST_RABBIT_URL"
	childQueueEnv = "IDEM_TEST_RABBIT_QUEUE"
	childDSNEnv   = "IDEM_TEST_RABBIT_DSN"
)

// fixture is a quorum queue of orders with its dead-letter queue, on the
// test binary's broker, and a registry with the orders table.
type fixture struct {
	conn        *amqp.Connection
	url         string
	queue, dead string
	store       registry.Store
}

func newFixture(t *testing.T, url, queue, dsn string) *fixture {
	t.Helper()
	return newFixtureOf(t, url, queue, dsn, amqp.Table{"x-queue-type": "quorum"})
}

// newFixtureOf is newFixture with the queue's arguments (nil: a classic
// queue).
func newFixtureOf(t *testing.T, url, queue, dsn string, args amqp.Table) *fixture {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &fixture{conn: conn, url: url, queue: queue, dead: queue + ".dead"}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(f.queue, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(f.dead, true, false, false, false, nil); err != nil {
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
		wg.Go(func() {
			rabbitmq.Consume(ctx, f.conn, p, rabbitmq.Config{Queue: f.queue, DeadLetterQueue: f.dead, Prefetch: 20})
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// publish publishes bodies with their keys, persistent, with confirms,
// on a connection of its own (a broker may block a publishing connection).
func (f *fixture) publish(t *testing.T, keys, bodies []string) {
	t.Helper()
	conn, err := amqp.Dial(f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var confs []*amqp.DeferredConfirmation
	for i := range keys {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", f.queue, false, false, amqp.Publishing{
			Headers: amqp.Table{rabbitmq.KeyHeader: keys[i]}, Body: []byte(bodies[i]), DeliveryMode: amqp.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// orders counts the business rows.
func (f *fixture) orders(t *testing.T) int { return orderstest.Count(t, f.store) }

// drained waits until queue holds no message, ready or unacknowledged
// (the consumers' prefetch): a passive declare counts the ready ones, so
// it also needs the consumers to have acknowledged what they hold —
// judged by the orders reaching want (-1: not checked).
func (f *fixture) drained(t *testing.T, queue string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ch, err := f.conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		ch.Close()
		if err == nil && q.Messages == 0 && (want < 0 || f.orders(t) >= want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s not drained within %v: %+v %v, %d orders", queue, within, q, err, f.orders(t))
		}
		time.Sleep(50 * time.Millisecond) // polling the queue's state
	}
}

// dupMessages is how many messages TestRabbitDuplicates publishes.
const dupMessages = 10_000

// TestRabbitDuplicates: 10,000 messages of which 1,000 are duplicate
// publishes of earlier ones, consumed by four concurrent consumers, give
// one order per key: 9,000 orders, and the duplicates answered as
// replays. threat:consumer-redelivery
func TestRabbitDuplicates(t *testing.T) {
	f := newFixture(t, rabbittest.URL(t), t.Name(), pgtest.DSN(t))
	var keys, bodies []string
	for i := range dupMessages {
		k := i
		if i%10 == 9 {
			k = i - 5
		}
		keys, bodies = append(keys, fmt.Sprintf("order-%d", k)), append(bodies, fmt.Sprintf(`{"n":%d}`, k))
	}
	f.publish(t, keys, bodies)
	var replays atomic.Int64
	f.consume(t, f.processor(&replays, false), 4)
	f.drained(t, f.queue, dupMessages*9/10, 5*time.Minute)
	deadline := time.Now().Add(time.Minute)
	for replays.Load() < dupMessages/10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling for the last duplicates' decisions
	}
	if n, r := f.orders(t), replays.Load(); n != dupMessages*9/10 || r < dupMessages/10 {
		t.Errorf("%d orders and %d replays; want 9,000 and at least 1,000", n, r)
	}
}

// TestRabbitKillBetweenCommitAndAck: a consumer process SIGKILLed after
// its message's transaction committed and before its ack leaves one
// order; the broker delivers the message again (the dead connection's
// unacknowledged message), another consumer answers it as a replay and
// acknowledges it: still one order. threat:consumer-redelivery
func TestRabbitKillBetweenCommitAndAck(t *testing.T) {
	url := rabbittest.URL(t)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "orders.db")
	f := newFixture(t, url, t.Name(), dsn)
	f.publish(t, []string{"order-1"}, []string{`{"sku":"A"}`})
	child := exec.Command(os.Args[0], "-test.run=^TestChildConsumer$", "-test.count=1")
	child.Env = append(os.Environ(), childURLEnv+"="+url, childQueueEnv+"="+f.queue, childDSNEnv+"="+dsn,
		failpoint.Env+"="+rabbitmq.AfterCommit+"=kill")
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
	deadline := time.Now().Add(time.Minute)
	for replays.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the message was not delivered again")
		}
		time.Sleep(20 * time.Millisecond) // polling for the redelivery's decision
	}
	f.drained(t, f.queue, 1, time.Minute)
	if n := f.orders(t); n != 1 {
		t.Errorf("%d orders after the redelivery, want 1", n)
	}
}

// TestChildConsumer is the consumer process TestRabbitKillBetweenCommitAndAck
// starts; it does nothing in a normal run.
func TestChildConsumer(t *testing.T) {
	url := os.Getenv(childURLEnv)
	if url == "" {
		t.Skip("the child consumer of TestRabbitKillBetweenCommitAndAck")
	}
	f := newFixture(t, url, os.Getenv(childQueueEnv), os.Getenv(childDSNEnv))
	f.consume(t, f.processor(nil, false), 1)
	time.Sleep(time.Minute) // the failpoint kills this process first
	t.Fatal("the failpoint did not kill the child")
}

// TestRabbitPoison: a message whose handler always fails is delivered
// MaxAttempts times (the quorum queue's delivery count; on a classic
// queue, which keeps no count, until its first redelivery), then
// published to the dead-letter queue with its body, key and reason and
// acknowledged; nothing of it is recorded.
func TestRabbitPoison(t *testing.T) {
	for name, args := range map[string]amqp.Table{"quorum": {"x-queue-type": "quorum"}, "classic": nil} {
		t.Run(name, func(t *testing.T) {
			f := newFixtureOf(t, rabbittest.URL(t), t.Name(), "sqlite:"+filepath.Join(t.TempDir(), "orders.db"), args)
			f.publish(t, []string{"order-bad"}, []string{`{"sku":"?"}`})
			f.consume(t, f.processor(nil, true), 1)
			ch, err := f.conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			deadline := time.Now().Add(time.Minute)
			for {
				d, ok, err := ch.Get(f.dead, true)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					if string(d.Body) != `{"sku":"?"}` || d.Headers[rabbitmq.KeyHeader] != "order-bad" || d.Headers[rabbitmq.HeaderDeadReason] == nil {
						t.Errorf("dead letter %q %v", d.Body, d.Headers)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no dead letter")
				}
				time.Sleep(20 * time.Millisecond) // polling the dead-letter queue
			}
			f.drained(t, f.queue, -1, time.Minute)
			if n := f.orders(t); n != 0 {
				t.Errorf("%d orders from a poison message, want 0", n)
			}
		})
	}
}
