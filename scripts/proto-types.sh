#!/usr/bin/env bash
# Writes the TypeScript types of the peer protocol (proto/redirfs.proto) into
# <out> (default src/cluster/generated), with @grpc/proto-loader's own
# generator. The options are the ones src/cluster/wire.ts loads the .proto
# with, so the types describe the objects grpc-js hands over.
# test/cluster/wire.test.ts checks the committed files are what this writes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/src/cluster/generated}
rm -rf "$out"
cd "$root"
npx --no-install proto-loader-gen-types --longs=Number --enums=String --defaults --oneofs --includeComments \
  --grpcLib=@grpc/grpc-js --outDir="$out" proto/redirfs.proto >/dev/null
