// The bench's cached datasets and packs (bench/run.py) are used again only
// when they are what this run would make: another generator, other
// parameters, another K or a pack of an earlier dataset are made again.
import t from 'tap'
import { benchPython as python } from '../helpers/bench'

const SMALL = 'size, classes = 400 * 1024, 2'

t.test('a dataset made by this generator with the same parameters is used again as it is', async t => {
  const { result, log } = await python(t, `${SMALL}
root, info = bench.ensure_dataset(data, size, classes, 0)
made = os.stat(os.path.join(root, "class000", "img000000.jpg")).st_mtime_ns
again, info_again = bench.ensure_dataset(data, size, classes, 0)
print(json.dumps({"same": again == root and info_again == info, "kept": os.stat(os.path.join(root, "class000", "img000000.jpg")).st_mtime_ns == made, "files": info["files"]}))`)
  t.same(result, { same: true, kept: true, files: 3 })
  t.equal(log.match(/generating/g)?.length, 1, 'generated once')
})

t.test('a dataset made by another generator version is made again', async t => {
  const { result, log } = await python(t, `${SMALL}
root, info = bench.ensure_dataset(data, size, classes, 0)
marker = os.path.join(root, ".complete.json")
old = json.load(open(marker)); old["generator"] = harness.DATASET_GENERATOR - 1; json.dump(old, open(marker, "w"))
bench.ensure_dataset(data, size, classes, 0)
print(json.dumps(json.load(open(marker))["generator"] == harness.DATASET_GENERATOR))`)
  t.equal(result, true)
  t.match(log, /was made with .*'generator': 0.*generating again/)
})

t.test('a cached pack of another K, or of an earlier dataset, is packed again; a matching one is kept', async t => {
  const { result, log } = await python(t, `${SMALL}
root, info = bench.ensure_dataset(data, 1200 * 1024, classes, 0)
pack = bench.ensure_pack(data, root, 4, info)
kept = os.stat(os.path.join(pack, "index.bin")).st_mtime_ns
same = bench.ensure_pack(data, root, 4, info)
unchanged = os.stat(os.path.join(same, "index.bin")).st_mtime_ns == kept
os.rename(pack, os.path.join(data, os.path.basename(root) + ".pack-k2"))
relabelled = bench.pack_header(bench.ensure_pack(data, root, 2, info))["chunkSize"]
earlier = dict(info, bytes=info["bytes"] + 1)
bench.ensure_pack(data, root, 2, earlier)
print(json.dumps({"unchanged": unchanged, "relabelled": relabelled}))`)
  t.same(result, { unchanged: true, relabelled: 2 })
  t.match(log, /pack-k2 is stale \(chunkSize 4 \(wanted 2\)\): packing again/, 'a K=4 pack under the K=2 name')
  t.match(log, /is stale \(sampleBytes \d+ \(wanted \d+\)\): packing again/, 'a pack of other bytes than the dataset has')
})

t.test('a cached pack this redirfs cannot read is packed again', async t => {
  const { result, log } = await python(t, `${SMALL}
root, info = bench.ensure_dataset(data, size, classes, 0)
pack = bench.ensure_pack(data, root, 2, info)
with open(os.path.join(pack, "index.bin"), "r+b") as f:
    f.seek(8); f.write((99).to_bytes(4, "little"))
print(json.dumps(bench.pack_header(bench.ensure_pack(data, root, 2, info))["version"]))`)
  t.type(result, 'number')
  t.not(result, 99)
  t.match(log, /is stale \(.*99.*\): packing again/)
})
