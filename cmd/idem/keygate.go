package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/keyring"
	"github.com/idemkit/idem/registry"
)

// defaultKeyRefresh is how often idem serve announces its keys and
// re-chooses the sealing key (--key-refresh).
const defaultKeyRefresh = 5 * time.Second

// instanceName names this process in the key roster: host, process ID and
// a random suffix, so a restarted process is a new instance.
func instanceName() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	var b [4]byte
	rand.Read(b[:])
	name := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	return strings.ReplaceAll(name[:min(len(name), 128)], " ", "_")
}

// gateOptions replaces the key ring of opts, if any, with a Gate over it
// and returns the Gate (nil without a ring). Every command that may seal a
// body goes through one, so none seals with a key a live instance lacks.
func gateOptions(opts *idemstore.Options) *keyring.Gate {
	ring, ok := opts.Sealer.(*keyring.Ring)
	if !ok {
		return nil
	}
	g := keyring.NewGate(ring, instanceName())
	opts.Sealer = g
	return g
}

// gateStore starts g (if not nil) on store's key roster: see
// startKeyGate. The stop it returns is never nil.
func gateStore(ctx context.Context, log *slog.Logger, g *keyring.Gate, store registry.Store, interval time.Duration) (stop func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	roster, ok := store.(registry.KeyRoster)
	if !ok {
		return nil, fmt.Errorf("this store cannot publish the keys it holds")
	}
	return startKeyGate(ctx, log, g, roster, interval)
}

// startKeyGate makes g's choice of sealing key follow the registry's key
// roster: one Refresh now (an error stops the caller), then one every
// interval in the background, logging when the key in use changes or an
// instance lacks the active key. The returned stop ends the loop and
// removes this instance from the roster.
func startKeyGate(ctx context.Context, log *slog.Logger, g *keyring.Gate, roster registry.KeyRoster, interval time.Duration) (stop func(), err error) {
	used, err := g.Refresh(ctx, roster, keyring.DefaultHolderWindow)
	if err != nil {
		return nil, fmt.Errorf("announcing the key ring's keys: %w", err)
	}
	logKeyChoice(log, g, "", used)
	loopCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
			}
			now, err := g.Refresh(loopCtx, roster, keyring.DefaultHolderWindow)
			if err != nil {
				if loopCtx.Err() == nil {
					log.Warn("cannot refresh the key roster; sealing with the key chosen before", "key", used, "err", err)
				}
				continue
			}
			logKeyChoice(log, g, used, now)
			used = now
		}
	}()
	return func() {
		cancel()
		<-done
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer fcancel()
		if err := roster.ForgetInstance(fctx, g.Instance()); err != nil {
			log.Warn("cannot remove this instance from the key roster; it ages out", "instance", g.Instance(), "err", err)
		}
	}, nil
}

// logKeyChoice logs the sealing key when it changes from was (""
// at start).
func logKeyChoice(log *slog.Logger, g *keyring.Gate, was, now string) {
	if was == now {
		return
	}
	active := g.Ring().ActiveKeyID()
	if now == active {
		log.Info("sealing new bodies with the active key", "key", now, "instance", g.Instance())
		return
	}
	log.Warn("the active key is not used yet: live instances lack it; sealing new bodies with a key they all hold",
		"active", active, "key", now, "lacking", strings.Join(g.Lacking(), " "), "instance", g.Instance())
}
