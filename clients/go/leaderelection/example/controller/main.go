// Command controller is a sample controller, run as replicas of one Deployment (one
// SPIFFE ID, several processes): the replicas elect a leader with the fenced
// leaderelection package, and only the leader works. Its work is a write to PostgreSQL,
// fenced by its term:
//
//	UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence <= $3
//
// `<=`, not the lock's strictly-less reference fence (integration/pause-test): a lock's
// grant writes once, so `<` also refuses a replayed delivery; a leader writes many times
// in one term, so its fence accepts its own term again and refuses every older one (as
// client/examples/singleton_worker.rs). 0 rows updated: a newer term has written, this
// leadership is over whatever the process believes; the controller stops leading.
//
// A leader frozen past its TTL (a GC pause, a paused VM, SIGSTOP) wakes after another
// replica was elected. If it wakes between its check and its write, the write carries the
// older term and PostgreSQL refuses it. SIGUSR1 asks the controller to pause at exactly
// that point, after its next check, before its write, until SIGUSR2:
// integration/tests/go_election.rs freezes it there with SIGSTOP past its TTL, thaws it
// with SIGCONT and lets it write with SIGUSR2. (The test stops the process from outside:
// a Go process's kill(getpid(), SIGSTOP) was seen to take effect only after the next
// statements had run, so the write was not reliably the late one.)
//
// --unfenced leaves the fence out of the WHERE clause (`WHERE id = $1`): the late write
// lands. Only for the test that shows the fence is what refuses it.
//
// Configuration, from the environment: LOCK_ENDPOINT, LOCK_SVID, LOCK_SVID_KEY, LOCK_CA,
// LOCK_SERVER_ID (the edge's SPIFFE ID), LOCK_INSTANCE (the pod's name or UID);
// CONTROLLER_KEY (the leadership key), CONTROLLER_PG (a PostgreSQL connection string),
// CONTROLLER_RECORD (the record's id), CONTROLLER_NAME (how the replica names itself).
//
// Output, one line per event: `<name> campaigns`, `<name> leads`, `<name> new leader
// <identity>`, `<name> wrote <n>`, `<name> freezes`, `<name> late write refused by the
// fence`, `<name> late write landed`, `<name> refused by the fence`, `<name> stopped
// leading`. The term is never printed: a token is a capability.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	lock "github.com/fenced-lock/fenced-lock/clients/go"
	"github.com/fenced-lock/fenced-lock/clients/go/leaderelection"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	fencedWrite   = "UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1 AND fence <= $3"
	unfencedWrite = "UPDATE fenced_resource SET value = $2, fence = $3 WHERE id = $1"
	writeEvery    = 200 * time.Millisecond
)

func main() {
	unfenced := flag.Bool("unfenced", false, "leave the fence out of the WHERE clause (a test's broken controller)")
	flag.Parse()
	if err := run(*unfenced); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fmt.Fprintf(os.Stderr, "controller: %s is not set\n", name)
		os.Exit(2)
	}
	return v
}

func run(unfenced bool) error {
	name := env("CONTROLLER_NAME")
	key := env("CONTROLLER_KEY")
	record, err := strconv.ParseInt(env("CONTROLLER_RECORD"), 10, 64)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := pgxpool.New(ctx, env("CONTROLLER_PG"))
	if err != nil {
		return err
	}
	defer db.Close()
	locks, err := lock.Dial(ctx, env("LOCK_ENDPOINT"),
		lock.WithSVIDFiles(env("LOCK_SVID"), env("LOCK_SVID_KEY"), env("LOCK_CA")),
		lock.WithServerID(env("LOCK_SERVER_ID")))
	if err != nil {
		return err
	}
	defer locks.Close()

	var freeze atomic.Bool
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			freeze.Store(true)
		}
	}()
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	write := fencedWrite
	if unfenced {
		write = unfencedWrite
	}
	say := func(format string, args ...any) { fmt.Printf(name+" "+format+"\n", args...) }

	n := 0
	elector, err := leaderelection.NewLeaderElector(leaderelection.Config{
		Client: locks,
		Key:    key,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, term *lock.Leadership) {
				say("leads")
				for ctx.Err() == nil && term.CanLead() {
					late := false
					if freeze.Swap(false) {
						// Checked, not yet written: stop here until SIGCONT.
						// Checked, not yet written: wait here for SIGUSR2 (the test
						// freezes the process with SIGSTOP meanwhile, past its TTL).
						say("freezes")
						<-usr2
						late = true
					}
					n++
					// The write's own context: the late write is the point, whatever
					// the leader's ctx says by now.
					wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					tag, err := db.Exec(wctx, write, record, fmt.Sprintf("%s:%d", name, n), int64(term.Term()))
					cancel()
					switch {
					case err != nil:
						say("write failed: %v", err)
					case tag.RowsAffected() == 0 && late:
						say("late write refused by the fence")
						return
					case tag.RowsAffected() == 0:
						// A newer term has written: this leadership is over.
						say("refused by the fence")
						return
					case late:
						say("late write landed")
						return
					default:
						say("wrote %d", n)
					}
					select {
					case <-ctx.Done():
					case <-time.After(writeEvery):
					}
				}
			},
			OnStoppedLeading: func() { say("stopped leading") },
			OnNewLeader:      func(id string) { say("new leader %s", id) },
		},
	})
	if err != nil {
		return err
	}
	say("identity %s", elector.Identity())
	for ctx.Err() == nil {
		say("campaigns")
		err := elector.Run(ctx)
		switch {
		case err == nil:
		case errors.Is(err, lock.ErrUnavailable), errors.Is(err, lock.ErrNoQuorum):
			time.Sleep(time.Second)
		default:
			return err
		}
	}
	return nil
}
