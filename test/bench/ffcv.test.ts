// FFCV in the bench (bench/ffcv_loader.py, bench/run.py): the .beton is
// written once and written again when it is not what this run would write,
// and FFCV's loader, as the bench runs it on this CPU-only machine, gives
// every sample once per epoch with its label.
import t, { type Test } from 'tap'
import { benchPython } from '../helpers/bench'

/** `benchPython` with a small generated dataset (`root`, `info`) made first. */
async function python (t: Test, body: string): Promise<{ result: any, log: string }> {
  return await benchPython(t, `root, info = bench.ensure_dataset(data, 600 * 1024, 2, 0)\n${body}`)
}

t.test('a .beton written by this conversion from this dataset is used again; another is written again', async t => {
  const { result, log } = await python(t, `
beton = bench.ensure_beton(data, root, info)
written = os.stat(beton).st_mtime_ns
kept = os.stat(bench.ensure_beton(data, root, info)).st_mtime_ns == written
marker = json.load(open(beton + ".json")); marker["format"] -= 1; json.dump(marker, open(beton + ".json", "w"))
bench.ensure_beton(data, root, info)
import ffcv_loader
print(json.dumps({"kept": kept, "format": json.load(open(beton + ".json"))["format"] == ffcv_loader.BETON_FORMAT, "samples": json.load(open(beton + ".json"))["samples"] == info["files"]}))`)
  t.same(result, { kept: true, format: true, samples: true })
  t.equal(log.match(/converting .* to FFCV's format/g)?.length, 2, 'converted twice: at first, and after the format changed')
  t.match(log, /was written from .*'format': 1.* converting again/)
})

t.test("FFCV's loader gives every sample once per epoch with its label, on a machine without CUDA", async t => {
  const { result } = await python(t, `
import collections, torch
from torchvision import datasets
import ffcv_loader
beton = bench.ensure_beton(data, root, info)
labels = collections.Counter(label for _, label in datasets.ImageFolder(root, loader=lambda p: p).samples)
loader = ffcv_loader.loader(beton, 2, 4)
epochs = []
for epoch in range(2):
    seen = collections.Counter()
    shapes = set()
    for images, batch_labels in loader:
        seen.update(int(label) for label in batch_labels.flatten())
        shapes.add(tuple(images.shape[1:]))
    epochs.append({"labels": seen == labels, "shapes": sorted(shapes)})
print(json.dumps({"files": sum(labels.values()), "epochs": epochs}))`)
  t.ok(result.files >= 5, `${result.files} files`)
  t.same(result.epochs, [{ labels: true, shapes: [[3, 224, 224]] }, { labels: true, shapes: [[3, 224, 224]] }])
})
