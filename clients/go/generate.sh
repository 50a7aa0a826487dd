#!/usr/bin/env bash
# Regenerates lockv1/ (the Go stubs of config/proto/lock/v1/lock.proto). The generated files
# are checked in: building or testing the client needs no protoc.
#
# Needs Debian's protoc (/usr/bin/protoc) and the two plugins, installed outside the repo:
#   GOBIN=~/.cache/fenced-lock/go-bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   GOBIN=~/.cache/fenced-lock/go-bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# lock.proto has no go_package option (it is shared by every client): the import path is
# given here with M flags instead. google/rpc/status.proto is not generated: grpc-go and
# google.golang.org/genproto/googleapis/rpc already provide it (and ErrorInfo).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${GO_BIN_DIR:-$HOME/.cache/fenced-lock/go-bin}"
protoc="${PROTOC:-/usr/bin/protoc}"
module="github.com/fenced-lock/fenced-lock/clients/go"

for tool in "$bin/protoc-gen-go" "$bin/protoc-gen-go-grpc" "$protoc"; do
  [ -x "$tool" ] || { echo "generate.sh: $tool missing (see the header of this script)" >&2; exit 1; }
done

map="Mlock/v1/lock.proto=$module/lockv1"
rm -f "$here"/lockv1/*.pb.go
mkdir -p "$here/lockv1"
"$protoc" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  -I "$root/config/proto" \
  --go_out="$here/lockv1" --go_opt=paths=source_relative,"$map" \
  --go-grpc_out="$here/lockv1" --go-grpc_opt=paths=source_relative,"$map" \
  lock/v1/lock.proto
# paths=source_relative writes lockv1/lock/v1/*.pb.go: flatten into lockv1/.
mv "$here"/lockv1/lock/v1/*.pb.go "$here/lockv1/"
rm -rf "$here/lockv1/lock"
gofmt -l "$here/lockv1" | (! grep .) || { echo "generate.sh: generated code is not gofmt-clean" >&2; exit 1; }
