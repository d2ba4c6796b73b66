// Every way a user might change a mount, each expected to fail with EROFS.
import { promises as fs, constants } from 'node:fs'
import path from 'node:path'

/** Attempts to change `mountpoint` through `sample` (a sample path) and `directory` (a class directory), relative to it. */
export function changeAttempts (mountpoint: string, sample: string, directory: string): [string, () => Promise<unknown>][] {
  const file = path.join(mountpoint, sample)
  return [
    ['write to a sample', async () => await fs.writeFile(file, 'x')],
    ['open a sample read-write', async () => await fs.open(file, 'r+')],
    ['append', async () => await fs.appendFile(file, 'x')],
    ['create', async () => await fs.writeFile(path.join(mountpoint, directory, 'new.jpg'), 'x')],
    ['mkdir', async () => await fs.mkdir(path.join(mountpoint, 'newclass'))],
    ['unlink', async () => await fs.unlink(file)],
    ['rmdir', async () => await fs.rmdir(path.join(mountpoint, directory))],
    ['rename', async () => await fs.rename(file, file + '.bak')],
    ['chmod', async () => await fs.chmod(file, 0o777)],
    ['truncate', async () => await fs.truncate(file, 0)],
    ['symlink', async () => await fs.symlink(directory, path.join(mountpoint, 'link'))],
    ['utimes', async () => await fs.utimes(file, new Date(), new Date())],
    ['access(W_OK)', async () => await fs.access(file, constants.W_OK)]
  ]
}
