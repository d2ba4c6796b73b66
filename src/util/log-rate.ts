/**
 * How many lines of one kind a log takes: at most `perMinute` a minute, the
 * rest counted and said in the next line that goes out. A user may make a
 * failure happen thousands of times a second (an open of a refused file in
 * a loop); the log, often on tmpfs in /run, must not grow with it. The
 * stats count every one.
 */
export class LogRate {
  private windowStart = -Infinity
  private taken = 0
  private held = 0

  constructor (private readonly perMinute: number, private readonly now: () => number = Date.now) {}

  /** Whether this line goes out; if so, how many were held back since the last one that did. */
  take (): { log: false } | { log: true, held: number } {
    const now = this.now()
    if (now - this.windowStart >= 60_000) {
      this.windowStart = now
      this.taken = 0
    }
    if (this.taken >= this.perMinute) {
      this.held++
      return { log: false }
    }
    this.taken++
    const held = this.held
    this.held = 0
    return { log: true, held }
  }
}
