package lock

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
)

// Request metadata the client sends (lock.proto, "Metadata").
const (
	// keyHeader carries a keyed call's key, percent-encoded (the edge's fast path).
	keyHeader = "lock-key"
	// instanceHeader carries the client's instance with OpenSession.
	instanceHeader = "lock-instance"
)

// EncodeKey returns key as the value of the `lock-key` request metadata: every printable
// ASCII byte but '%' as is, every other byte of the UTF-8 key as %XX (upper-case hex). It
// is the same encoding as the Rust, Python and Node clients (lock_config::edge_headers),
// one spelling per key, so the edge and the arbiter agree on it.
func EncodeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 0x21 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
	}
	return b.String()
}

// keyed returns ctx carrying key as `lock-key` outgoing metadata.
func keyed(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, keyHeader, EncodeKey(key))
}
