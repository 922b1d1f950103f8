import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  fchmodSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import path from "node:path";
import type { DlqEntry, MessageRecord } from "./types.ts";

/** What a journal held: what the broker takes back at start. */
export interface Recovered {
  /** Waiting messages and the messages of dead letters, in creation order. */
  messages: MessageRecord[];
  dlq: DlqEntry[];
  dedup: DedupLine[];
}

/** One deduplication key, the message it stands for, and when it expires. */
export interface DedupLine {
  key: string;
  messageId: string;
  until: number;
}

type Line =
  | { m: StoredMessage }
  | { dlq: StoredDlqEntry }
  | { undlq: string }
  | { dedup: string[]; id: string; until: number };

/** A message as a line carries it: the body as base64, everything else as it is. */
type StoredMessage = Omit<MessageRecord, "body"> & { body: string };
type StoredDlqEntry = Omit<DlqEntry, "message"> & { messageId: string };

const MIN_COMPACT_BYTES = 16 * 1024 * 1024;

/**
 * The dev server's queue on disk, when it is given a state file (ADR 0029): QStash
 * holds a message it accepted until it is delivered or dead-lettered, whatever happens
 * to the process, and the relay marks an event fanned out on that promise.
 *
 * One JSON line per change, written with a synchronous write before the change is
 * answered (a publish's `messageId` goes out only after its line is in the file), so a
 * killed process loses nothing it answered; the page cache keeps the lines, hence no
 * fsync per write (a machine crash is not what a dev server guards against). Lines:
 *
 * - `{"m": <message>}` a message as it now is (created, attempted, cancelled);
 * - `{"dlq": <entry, its message by id>}` and `{"undlq": <dlqId>}`;
 * - `{"dedup": [<keys>], "id": <messageId>, "until": <epoch ms>}`.
 *
 * An attempt's start is not written: a message killed mid-attempt comes back as it was
 * before the attempt and is tried again (at least once, as QStash). Opening the file
 * replays it and writes back only what is live (messages not yet delivered, dead
 * letters, deduplication keys in their window); so does `compact`, which the broker
 * calls once the file has grown past four times that and 16 MB.
 */
export class Journal {
  /** Undefined once closed: a descriptor number is reused by the next file or socket opened. */
  #fd: number | undefined;
  #written = 0;
  #compactAt: number;

  private constructor(
    readonly file: string,
    fd: number,
    liveBytes: number,
  ) {
    this.#fd = fd;
    this.#written = liveBytes;
    this.#compactAt = Math.max(MIN_COMPACT_BYTES, liveBytes * 4);
  }

  /**
   * Replays `file` (absent: an empty state), writes its live part back as a fresh file
   * and opens it for appending. A line that cannot be read stops the start with the
   * file's name and the line's number, except a last line cut short (a write the
   * process died in), which is dropped.
   */
  static open(file: string, now = Date.now()): { journal: Journal; recovered: Recovered } {
    mkdirSync(path.dirname(file), { recursive: true });
    lock(file);
    try {
      const recovered = existsSync(file) ? replay(file, now) : { messages: [], dlq: [], dedup: [] };
      const liveBytes = rewrite(file, liveLines(recovered));
      const fd = openSync(file, "a");
      return { journal: new Journal(file, fd, liveBytes), recovered };
    } catch (error) {
      unlock(file);
      throw error;
    }
  }

  putMessage(message: MessageRecord): void {
    this.#append({ m: stored(message) });
  }

  putDlq(entry: DlqEntry): void {
    const { message, ...rest } = entry;
    this.#append({ dlq: { ...rest, messageId: message.messageId } });
  }

  dropDlq(dlqId: string): void {
    this.#append({ undlq: dlqId });
  }

  remember(keys: string[], messageId: string, until: number): void {
    if (keys.length > 0) this.#append({ dedup: keys, id: messageId, until });
  }

  /** True once the file has grown enough that `compact` should be called. */
  get wantsCompaction(): boolean {
    return this.#written >= this.#compactAt;
  }

  /** Writes `live` as the whole file (a new file, then renamed over the old one). */
  compact(live: Recovered): void {
    const fd = this.#open();
    this.#fd = undefined;
    closeSync(fd);
    const bytes = rewrite(this.file, liveLines(live));
    this.#fd = openSync(this.file, "a");
    this.#written = bytes;
    this.#compactAt = Math.max(MIN_COMPACT_BYTES, bytes * 4);
  }

  /** Forgets everything: the file is emptied (the dev server's reset). */
  clear(): void {
    this.compact({ messages: [], dlq: [], dedup: [] });
  }

  close(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
    unlock(this.file);
  }

  #append(line: Line): void {
    this.#written += writeAll(this.#open(), `${JSON.stringify(line)}\n`);
  }

  /** A change after close (a publish while the server stops) fails: answered, it would be lost. */
  #open(): number {
    if (this.#fd === undefined) throw new Error(`the queue file ${this.file} is closed`);
    return this.#fd;
  }
}

/**
 * One server per file, held by `<file>.lock` naming its pid. A second server on the same
 * file rewrote it at start (a new file renamed over the one the first was appending to),
 * and every later line of the first went to a file no name reached any more. A lock
 * whose process is gone (killed) is taken over.
 */
function lock(file: string): void {
  const lockFile = `${file}.lock`;
  for (;;) {
    try {
      writeFileSync(lockFile, `${process.pid}\n`, { flag: "wx" });
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const holder = Number(readFileSync(lockFile, "utf8").trim());
    if (Number.isInteger(holder) && holder > 0 && running(holder)) {
      throw new Error(
        `${file} is in use by another QStash dev server (pid ${holder}); stop it, or give this one a file of its own`,
      );
    }
    rmSync(lockFile, { force: true });
  }
}

function unlock(file: string): void {
  rmSync(`${file}.lock`, { force: true });
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function stored(message: MessageRecord): StoredMessage {
  return { ...message, body: message.body.toString("base64") };
}

/**
 * A message as the broker takes it back. One written mid-attempt (a compaction while it
 * was being delivered) is as it was before that attempt: waiting, to be tried again.
 */
function restored(line: StoredMessage): MessageRecord {
  const message: MessageRecord = { ...line, body: Buffer.from(line.body, "base64") };
  if (message.state === "ACTIVE") {
    message.state = message.retried > 0 ? "RETRY" : "CREATED";
    message.attempts = message.attempts.filter((a) => a.finishedAt !== undefined);
  }
  return message;
}

function replay(file: string, now: number): Recovered {
  const messages = new Map<string, MessageRecord>();
  const dlq = new Map<string, StoredDlqEntry>();
  const dedup = new Map<string, DedupLine>();
  const lines = readFileSync(file, "utf8").split("\n");
  // The text after the last newline is a line the process died writing, or nothing.
  const last = lines.pop();
  if (last) lines.push(last);
  lines.forEach((text, index) => {
    if (text === "") return;
    let line: Line;
    try {
      line = JSON.parse(text) as Line;
    } catch {
      if (index === lines.length - 1 && text === last) return;
      throw new Error(
        `${file}, line ${index + 1}, is not a journal line; move the file away to start with an empty queue`,
      );
    }
    if ("m" in line) {
      messages.set(line.m.messageId, restored(line.m));
    } else if ("dlq" in line) {
      dlq.set(line.dlq.dlqId, line.dlq);
    } else if ("undlq" in line) {
      dlq.delete(line.undlq);
    } else if ("dedup" in line) {
      for (const key of line.dedup) dedup.set(key, { key, messageId: line.id, until: line.until });
    }
  });
  const entries: DlqEntry[] = [];
  for (const { messageId, ...rest } of dlq.values()) {
    const message = messages.get(messageId);
    if (message) entries.push({ ...rest, message });
  }
  const inDlq = new Set(entries.map((e) => e.message.messageId));
  return {
    messages: [...messages.values()]
      .filter((m) => m.state === "CREATED" || m.state === "RETRY" || inDlq.has(m.messageId))
      .sort((a, b) => a.seq - b.seq),
    dlq: entries.sort((a, b) => a.createdAt - b.createdAt),
    dedup: [...dedup.values()].filter((d) => d.until > now).sort((a, b) => a.until - b.until),
  };
}

function liveLines(live: Recovered): string {
  const lines: Line[] = [
    ...live.messages.map((m) => ({ m: stored(m) })),
    ...live.dlq.map(({ message, ...rest }) => ({ dlq: { ...rest, messageId: message.messageId } })),
    ...live.dedup.map((d) => ({ dedup: [d.key], id: d.messageId, until: d.until })),
  ];
  return lines.map((line) => `${JSON.stringify(line)}\n`).join("");
}

/**
 * Writes `text` as the whole of `file`, atomically: a reader sees the old file or the
 * new one. Readable by its owner only: it holds job bodies, tenants' data (it was
 * 0644, readable by every user of a shared machine, as a security review found).
 */
function rewrite(file: string, text: string): number {
  const temporary = `${file}.new`;
  const fd = openSync(temporary, "w", 0o600);
  try {
    // A `.new` left by a killed process keeps its mode; open's applies only to a new file.
    fchmodSync(fd, 0o600);
    const bytes = writeAll(fd, text);
    fsyncSync(fd);
    renameSync(temporary, file);
    return bytes;
  } finally {
    closeSync(fd);
  }
}

/** writeSync until every byte is written (it may take fewer than it was given). */
function writeAll(fd: number, text: string): number {
  const bytes = Buffer.from(text, "utf8");
  let at = 0;
  while (at < bytes.length) at += writeSync(fd, bytes, at);
  return bytes.length;
}
