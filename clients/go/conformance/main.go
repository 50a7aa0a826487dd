// Command conformance is the Go client's driver of the client conformance suite
// (clients/conformance/README.md): it reads one JSON command a line on stdin, runs each
// on its own goroutine as calls of the client library, and writes one answer per command
// and the events (fenced, observed, observe_error) on stdout, one whole line each. It
// holds no lock rule of its own: everything the conductor checks is the library's.
//
// Build it from clients/go with `go build -o <out> ./conformance`.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	lock "github.com/fenced-lock/fenced-lock/clients/go"
)

// command is one line of the conductor. ID is echoed as it came.
type command struct {
	ID       json.RawMessage `json:"id"`
	Op       string          `json:"op"`
	Client   string          `json:"client"`
	Instance *string         `json:"instance"`
	Key      string          `json:"key"`
	Keys     []string        `json:"keys"`
	Hold     string          `json:"hold"`
	WaitMS   int64           `json:"wait_ms"`
	Obs      string          `json:"obs"`
}

// fields are an answer's or an event's members besides id and ok.
type fields map[string]any

// driverError is a command the driver cannot perform (an unknown op or name): reason DRIVER.
type driverError struct{ msg string }

func (e driverError) Error() string { return e.msg }

func driverErr(format string, args ...any) error { return driverError{fmt.Sprintf(format, args...)} }

// out writes whole lines to stdout, one writer at a time.
type out struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *out) write(v fields) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.enc.Encode(v); err != nil {
		// The conductor is gone: nothing left to answer to.
		os.Exit(1)
	}
}

func (o *out) answer(id json.RawMessage, f fields, err error) {
	if id == nil {
		id = json.RawMessage("null")
	}
	line := fields{"id": id, "ok": err == nil}
	if err != nil {
		line["reason"], line["message"] = reasonOf(err), err.Error()
	} else {
		for k, v := range f {
			line[k] = v
		}
	}
	o.write(line)
}

// reasonOf names an error by its type, never its message: the lock.v1 reason it stands
// for, DRIVER for the driver's own, the name of a local failure the client raised (FENCED,
// CLOSED), and UNAVAILABLE for anything without a reason (a transport failure, a local
// timeout).
func reasonOf(err error) string {
	var d driverError
	switch reason := lock.ReasonOf(err); {
	case reason != "":
		return reason
	case errors.As(err, &d):
		return "DRIVER"
	case errors.Is(err, lock.ErrFenced):
		return "FENCED"
	case errors.Is(err, lock.ErrClosed):
		return "CLOSED"
	default:
		return "UNAVAILABLE"
	}
}

func main() {
	d := newDriver(&out{enc: json.NewEncoder(os.Stdout)})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 16<<20)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			fmt.Fprintf(os.Stderr, "conformance: a line that is not a command: %v\n", err)
			d.out.answer(cmd.ID, nil, driverErr("not a command: %v", err))
			continue
		}
		if cmd.Op == "exit" {
			d.out.answer(cmd.ID, nil, nil)
			os.Exit(0)
		}
		go func() {
			if cmd.Op == "observe" {
				d.observe(cmd) // answers, then writes its events
				return
			}
			f, err := d.run(context.Background(), cmd)
			d.out.answer(cmd.ID, f, err)
		}()
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "conformance: stdin: %v\n", err)
		os.Exit(1)
	}
}
