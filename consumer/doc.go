// Package consumer is idem's door for messages that brokers deliver at
// least once: a Processor runs each message's handler exactly once
// through the registry, keyed by the message's idempotency key (one the
// producer set, else the broker's message ID), so that redelivery after a
// crash, a duplicate publish or a consumer-group rebalance never runs
// the effect twice.
//
// The handler's business writes, the record of the message and any
// outbox messages commit in one transaction (an operation.Core, the core
// of every door, in the one-transaction style: nothing in flight in the
// registry), and the
// broker adapter acknowledges the message only after that commit. A
// consumer that dies between the commit and the ack gets the message
// again; the registry answers it as a replay and the adapter acknowledges
// it without running the handler. Process returns what the adapter must
// do with the delivery (Decision): acknowledge it, deliver it again
// later, or move it to the dead-letter path — a message whose key was
// used for another message, one that has no key, and one whose handler
// failed MaxAttempts times.
//
// Adapters: consumer/jetstream (NATS JetStream) and consumer/rabbitmq
// (RabbitMQ, AMQP 0-9-1). docs/consumers.md describes the door.
//
// Everything in this package is safe for concurrent use.
package consumer
