package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	lock "github.com/fenced-lock/fenced-lock/clients/go"
)

// held is what the driver does with any hold: a Hold, a SharedHold, a HeldSet or a term.
type held interface {
	Token() uint64
	CanStart() bool
	Fenced() bool
	RemainingTTL() time.Duration
	Release(context.Context) error
}

// term is a Leadership as a held: its term is its token, Resign its release.
type term struct{ *lock.Leadership }

func (t term) Token() uint64                     { return t.Term() }
func (t term) CanStart() bool                    { return t.CanLead() }
func (t term) Release(ctx context.Context) error { return t.Resign(ctx) }

// client is a Client and the context of its observations, ended at its shutdown.
type client struct {
	*lock.Client
	observing context.Context
	stop      context.CancelFunc
}

// driver maps the conductor's names to the library's objects.
type driver struct {
	out *out

	mu      sync.Mutex
	clients map[string]*client
	holds   map[string]held
}

func newDriver(o *out) *driver {
	return &driver{out: o, clients: map[string]*client{}, holds: map[string]held{}}
}

func (d *driver) run(ctx context.Context, cmd command) (fields, error) {
	switch cmd.Op {
	case "client":
		return d.newClient(ctx, cmd)
	case "acquire", "acquire_shared", "acquire_all", "campaign":
		return d.acquire(ctx, cmd)
	case "release":
		h, err := d.hold(cmd.Hold)
		if err != nil {
			return nil, err
		}
		return nil, h.Release(ctx)
	case "state":
		h, err := d.hold(cmd.Hold)
		if err != nil {
			return nil, err
		}
		return fields{
			"can_start":    h.CanStart(),
			"fenced":       h.Fenced(),
			"remaining_ms": h.RemainingTTL().Milliseconds(),
		}, nil
	case "shutdown":
		c, err := d.client(cmd.Client)
		if err != nil {
			return nil, err
		}
		c.stop()
		return nil, c.Shutdown(ctx)
	default:
		return nil, driverErr("unknown op %q", cmd.Op)
	}
}

// newClient dials the edge from the environment the conductor sets, with the public
// options integration_test.go uses. LOCK_INSTANCE is read by the library itself; an
// explicit instance goes as it is (WithInstance).
func (d *driver) newClient(ctx context.Context, cmd command) (fields, error) {
	env := map[string]string{}
	for _, name := range []string{"LOCK_ENDPOINT", "LOCK_SVID", "LOCK_SVID_KEY", "LOCK_CA", "LOCK_SERVER_ID"} {
		if env[name] = os.Getenv(name); env[name] == "" {
			return nil, driverErr("%s is not set", name)
		}
	}
	endpoint := env["LOCK_ENDPOINT"]
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint // the README gives host:port
	}
	opts := []lock.DialOption{
		lock.WithSVIDFiles(env["LOCK_SVID"], env["LOCK_SVID_KEY"], env["LOCK_CA"]),
		lock.WithServerID(env["LOCK_SERVER_ID"]),
	}
	if cmd.Instance != nil {
		opts = append(opts, lock.WithInstance(*cmd.Instance))
	}
	c, err := lock.Dial(ctx, endpoint, opts...)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, taken := d.clients[cmd.Client]; taken {
		_ = c.Close()
		return nil, driverErr("client %q exists already", cmd.Client)
	}
	observing, stop := context.WithCancel(context.Background())
	d.clients[cmd.Client] = &client{Client: c, observing: observing, stop: stop}
	return fields{"instance": c.Instance()}, nil
}

// acquire is every acquire op, waiting up to wait_ms. Without a wait, the Try variants;
// a campaign has none (it waits to lead), so wait_ms 0 lets it wait as long as it takes.
func (d *driver) acquire(ctx context.Context, cmd command) (fields, error) {
	c, err := d.client(cmd.Client)
	if err != nil {
		return nil, err
	}
	wait := cmd.WaitMS > 0
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(cmd.WaitMS)*time.Millisecond)
		defer cancel()
	}
	name := cmd.Hold
	onFence := lock.WithOnFence(func() { d.out.write(fields{"event": "fenced", "hold": name}) })
	var h held
	switch {
	case cmd.Op == "acquire" && wait:
		h, err = nilIfErr(c.Acquire(ctx, cmd.Key, onFence))
	case cmd.Op == "acquire":
		h, err = nilIfErr(c.TryAcquire(ctx, cmd.Key, onFence))
	case cmd.Op == "acquire_shared" && wait:
		h, err = nilIfErr(c.AcquireShared(ctx, cmd.Key, onFence))
	case cmd.Op == "acquire_shared":
		h, err = nilIfErr(c.TryAcquireShared(ctx, cmd.Key, onFence))
	case cmd.Op == "acquire_all" && wait:
		h, err = nilIfErr(c.AcquireAll(ctx, cmd.Keys, onFence))
	case cmd.Op == "acquire_all":
		h, err = nilIfErr(c.TryAcquireAll(ctx, cmd.Keys, onFence))
	default:
		var l *lock.Leadership
		if l, err = c.Campaign(ctx, cmd.Key, onFence); err == nil {
			h = term{l}
		}
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.holds[name] = h // a name used again names the newer hold
	d.mu.Unlock()
	return fields{"token": strconv.FormatUint(h.Token(), 10)}, nil
}

// nilIfErr turns a typed hold and its error into a held, nil (not a typed nil) on error.
func nilIfErr[H held](h H, err error) (held, error) {
	if err != nil {
		return nil, err
	}
	return h, nil
}

// observe answers once the stream is open (its first change, the current holder, came),
// then, on the command's goroutine, writes every change as an event. The library resumes
// a broken stream by itself; an error it gives up with is an observe_error event, and the
// observation ends there.
func (d *driver) observe(cmd command) {
	c, err := d.client(cmd.Client)
	if err != nil {
		d.out.answer(cmd.ID, nil, err)
		return
	}
	o := c.Observe(c.observing, cmd.Key)
	defer o.Close()
	ev, err := o.Next()
	d.out.answer(cmd.ID, nil, err)
	if err != nil {
		return
	}
	for ; err == nil; ev, err = o.Next() {
		d.out.write(fields{
			"event":    "observed",
			"obs":      cmd.Obs,
			"revision": strconv.FormatInt(ev.Revision, 10),
			"held":     ev.Held,
			"kind":     ev.Change.String(),
		})
	}
	if c.observing.Err() == nil { // not ended by the client's shutdown
		d.out.write(fields{"event": "observe_error", "obs": cmd.Obs, "reason": reasonOf(err), "message": err.Error()})
	}
}

func (d *driver) client(name string) (*client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.clients[name]; ok {
		return c, nil
	}
	return nil, driverErr("no client %q", name)
}

func (d *driver) hold(name string) (held, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h, ok := d.holds[name]; ok {
		return h, nil
	}
	return nil, driverErr("no hold %q", name)
}
