/** Where a server-sent event stream stands: between two events, or inside one. */

/** The last bytes a stream passed on, to tell whether it stopped between two events (after a blank line) or inside one. */
export class SseTail {
  // The last four bytes, the newest lowest; it starts as after a blank line: a stream that sent nothing is between events.
  private tail = 0x0a0a;

  /** Records a chunk that was passed on. */
  push(chunk: Buffer): void {
    for (let i = Math.max(0, chunk.length - 4); i < chunk.length; i++) this.tail = ((this.tail << 8) | chunk[i]) >>> 0;
  }

  /** True when the bytes passed on end with a blank line (`\n\n`, or `\r\n\r\n` as some servers write it). */
  atBoundary(): boolean {
    return (this.tail & 0xffff) === 0x0a0a || (this.tail & 0xffffff) === 0x0a0d0a;
  }
}
