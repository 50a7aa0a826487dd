package lock

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// InstanceEnv is the environment variable the client reads its instance prefix from: set
// it to the pod UID (downward API) so that every process of the pod is recognisably its.
const InstanceEnv = "LOCK_INSTANCE"

// MaxInstanceLen is the longest `lock-instance` value the service accepts.
const MaxInstanceLen = 253

// ValidInstance reports whether s is a `lock-instance` value the service accepts: 1 to
// MaxInstanceLen characters of A-Z a-z 0-9 . _ : - (lock_config::instance::parse_instance).
// In particular '/' is refused: the service answers MALFORMED_REQUEST at OpenSession.
func ValidInstance(s string) bool {
	if len(s) == 0 || len(s) > MaxInstanceLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// InstanceName builds a Client's instance from its parts, `<prefix>:<pid>:<n>`: prefix is
// env (LOCK_INSTANCE) when the whole result with it is a valid instance (A-Z a-z 0-9 . _ : -,
// at most MaxInstanceLen characters; the service refuses '/'), else fallback (the
// process's random `p-<16 hex>`); pid is the process id and n the Client's number in its
// process (1 for the first Client, 2 for the next, ...). Each Client is its own contender:
// two Clients of one process (another n), or processes sharing one LOCK_INSTANCE (another
// pid), queue behind each other instead of being told LEAKED_HOLD, while a restarted
// process that is pid 1 again gets its previous life's instance for its first Client and
// is told LEAKED_HOLD on meeting its own old hold.
func InstanceName(env string, pid int, n uint64, fallback string) string {
	tail := ":" + strconv.Itoa(pid) + ":" + strconv.FormatUint(n, 10)
	if env != "" && ValidInstance(env+tail) {
		return env + tail
	}
	return fallback + tail
}

// instanceSeq numbers a process's Clients: its zero value's first next is 1.
type instanceSeq struct{ n atomic.Uint64 }

func (s *instanceSeq) next() uint64 { return s.n.Add(1) }

// clientSeq numbers this process's Clients that name their instance by the rule.
var clientSeq instanceSeq

// fallbackPrefix is this process's instance prefix when LOCK_INSTANCE is unset or does
// not fit: `p-` and 64 random bits as hex, drawn once per process.
var fallbackPrefix = sync.OnceValue(func() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return "p-" + hex.EncodeToString(b[:])
})

// newInstance is the instance of a new Client that is given none (WithInstance):
// InstanceName(LOCK_INSTANCE, pid, the next Client number, the process's fallback prefix).
func newInstance() string {
	return InstanceName(os.Getenv(InstanceEnv), os.Getpid(), clientSeq.next(), fallbackPrefix())
}
