// The subset of fuse-native 2.2.6 that redirfs uses (the package ships no types).
declare module 'fuse-native' {
  type Callback = (...args: any[]) => void
  export interface FuseOptions {
    fsname?: string
    allowOther?: boolean
    defaultPermissions?: boolean
    timeout?: number | false
    force?: boolean
    mkdir?: boolean
    debug?: boolean
  }
  class Fuse {
    constructor (mountpoint: string, ops: Record<string, Callback>, options?: FuseOptions)
    mount (cb: (err: Error | null) => void): void
    unmount (cb: (err: Error | null) => void): void
    static unmount (mountpoint: string, cb: (err: Error | null) => void): void
  }
  export = Fuse
}
