package lock

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
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

// InstanceName builds a Client's instance from its parts: prefix (LOCK_INSTANCE, or "go"
// when that is unset or not a valid instance), the process id and a per-Client random
// suffix, joined with ':' (the service refuses '/'). Each Client is its own contender: two
// Clients of one process, or processes sharing one LOCK_INSTANCE, queue behind each other
// instead of being told LEAKED_HOLD. A prefix too long to fit is cut so that the result
// stays within MaxInstanceLen.
func InstanceName(prefix string, pid int, suffix string) string {
	if !ValidInstance(prefix) {
		prefix = "go"
	}
	tail := ":" + strconv.Itoa(pid) + ":" + suffix
	if len(prefix)+len(tail) > MaxInstanceLen {
		prefix = prefix[:MaxInstanceLen-len(tail)]
	}
	return prefix + tail
}

// newInstance is the instance of a new Client: InstanceName(LOCK_INSTANCE, pid, 64 random
// bits as hex).
func newInstance() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return InstanceName(os.Getenv(InstanceEnv), os.Getpid(), hex.EncodeToString(b[:])), nil
}
