import { randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import http from "node:http";
import { buildCallbackBody } from "./callbacks.ts";
import { DedupStore } from "./dedup.ts";
import { deliver, type DeliveryResult } from "./delivery.ts";
import type { DlqRetryOverrides, PublishRequest } from "./publish-request.ts";
import { isNonRetryable, nextRetryDelay } from "./retry-policy.ts";
import { Journal, type Recovered } from "./journal.ts";
import { Scheduler } from "./scheduler.ts";
import { signJwt } from "./signing.ts";
import { MessageStore } from "./store.ts";
import type {
  Attempt,
  DeliveryOptions,
  DlqEntry,
  FlowControlInfo,
  MessageKind,
  MessageRecord,
  MessageState,
} from "./types.ts";

export interface BrokerConfig {
  timeScale: number;
  dedupWindowMs: number;
  signingKey: () => string;
  log: (line: string) => void;
  /**
   * Keep the queue in this file across restarts (a journal: journal.ts, ADR 0029):
   * waiting messages, dead letters and deduplication keys come back on the next start.
   * Unset, everything is in memory only, as tests and benchmarks want it.
   */
  stateFile?: string;
  /** Start with delivery paused (resumeDelivery starts it): nothing restored is tried before its destination is up. */
  startPaused?: boolean;
  /** Settled messages kept for messages() and GET /v2/messages (MessageStore); unlimited when unset. */
  keepSettled?: number;
}

export interface PublishResult {
  messageId: string;
  url: string;
  deduplicated?: true;
}

/** QStash ids look like `msg_<random>`; the exact alphabet is not part of any contract. */
const newMessageId = () => `msg_${randomBytes(16).toString("base64url")}`;

/**
 * The message broker: accepts publishes (with deduplication), runs delivery
 * attempts, and applies QStash's outcome rules: retry with backoff, DLQ,
 * callbacks and failure callbacks (which are themselves signed messages).
 */
export class Broker {
  readonly store: MessageStore;
  private readonly dedup: DedupStore;
  private readonly scheduler: Scheduler;
  private readonly abort = new AbortController();
  /** Kept-alive connections to destinations, shared by every attempt (see deliver()). */
  private readonly agent = new http.Agent({ keepAlive: true });
  private readonly journal: Journal | undefined;
  /** What the state file held at start: messages waiting, dead letters. */
  readonly restored: { waiting: number; deadLetters: number } = { waiting: 0, deadLetters: 0 };

  constructor(private readonly config: BrokerConfig) {
    this.store = new MessageStore(config.keepSettled);
    // Every in-flight delivery listens on this one signal; thousands are normal, not a leak.
    setMaxListeners(0, this.abort.signal);
    this.dedup = new DedupStore(config.dedupWindowMs);
    this.scheduler = new Scheduler((message, startedAt) => this.attempt(message, startedAt));
    if (config.startPaused) this.scheduler.pause();
    if (config.stateFile !== undefined) {
      const { journal, recovered } = Journal.open(config.stateFile);
      this.journal = journal;
      this.restore(recovered);
    }
  }

  private restore(recovered: Recovered): void {
    let seq = 0;
    for (const message of recovered.messages) {
      seq = Math.max(seq, message.seq + 1);
      this.store.add(message);
      if (message.state === "CREATED" || message.state === "RETRY") {
        this.scheduler.schedule(message);
        this.restored.waiting++;
      }
    }
    this.store.restoreMessageSeq(seq);
    for (const entry of recovered.dlq) this.store.dlq.set(entry.dlqId, entry);
    this.restored.deadLetters = recovered.dlq.length;
    for (const { key, messageId, until } of recovered.dedup) this.dedup.restore(key, messageId, until);
  }

  /** Writes a message's line (journal.ts); the file is written afresh when it has grown enough. */
  private persist(write: (journal: Journal) => void): void {
    if (!this.journal) return;
    write(this.journal);
    if (this.journal.wantsCompaction) this.journal.compact(this.live());
  }

  /** What a restart must find: messages not yet settled, dead letters, deduplication keys. */
  private live(): Recovered {
    const dlq = [...this.store.dlq.values()];
    const waiting = [...this.store.messages.values()].filter(
      (m) => m.state === "CREATED" || m.state === "RETRY" || m.state === "ACTIVE",
    );
    return {
      messages: [...waiting, ...dlq.map((e) => e.message)].sort((a, b) => a.seq - b.seq),
      dlq,
      dedup: this.dedup.entries(),
    };
  }

  publish(request: PublishRequest, callerIP: string): PublishResult {
    const keys = DedupStore.keysFor(request);
    const existing = this.dedup.find(keys);
    if (existing !== undefined) return { messageId: existing, url: request.destination, deduplicated: true };
    const message = this.createMessage(
      "publish",
      request.destination,
      request.body,
      request.options,
      callerIP,
      {
        notBefore: request.notBefore,
        callback: request.callback,
        failureCallback: request.failureCallback,
        callbackOptions: request.callbackOptions,
        failureCallbackOptions: request.failureCallbackOptions,
        flowControl: request.flowControl,
        deduplicationId: request.deduplicationId,
        labels: request.labels,
      },
    );
    // After the message's own line: a process killed between the two leaves a message
    // without its key (a replayed publish at worst delivers twice), never a key without
    // its message (a replayed publish "deduplicated" into a job that never runs).
    const until = this.dedup.remember(keys, message.messageId);
    this.persist((journal) => journal.remember(keys, message.messageId, until));
    return { messageId: message.messageId, url: message.url };
  }

  pauseDelivery(): void {
    this.scheduler.pause();
    this.store.changed();
  }

  resumeDelivery(): void {
    this.scheduler.resume();
    this.store.changed();
  }

  get deliveryPaused(): boolean {
    return this.scheduler.isPaused;
  }

  /** A flow-control key's wait list and limits; undefined for a key never seen since start-up. */
  flowControl(key: string): FlowControlInfo | undefined {
    return this.scheduler.flowControlInfo(key);
  }

  flowControls(): FlowControlInfo[] {
    return this.scheduler.flowControlKeys().flatMap((key) => this.scheduler.flowControlInfo(key) ?? []);
  }

  /** Cancels a message that has not finished; QStash's DELETE /v2/messages/<id>. */
  cancel(messageId: string): boolean {
    const message = this.store.get(messageId);
    if (!message || (message.state !== "CREATED" && message.state !== "RETRY")) return false;
    this.scheduler.unschedule(message);
    message.state = "CANCELLED";
    this.persist((journal) => journal.putMessage(message));
    this.store.changed(message);
    return true;
  }

  /**
   * POST /v2/dlq/retry: a new message with the original body, headers and settings,
   * and the DLQ entry is removed. Headers sent with the retry request override the
   * original settings (the retry docs allow e.g. `Upstash-Retries: 0`).
   */
  retryFromDlq(dlqId: string, overrides: DlqRetryOverrides = { options: {} }): PublishResult | undefined {
    const entry = this.store.dlq.get(dlqId);
    if (!entry) return undefined;
    this.store.dlq.delete(dlqId);
    this.persist((journal) => journal.dropDlq(dlqId));
    const source = entry.message;
    const originalHeaders = Object.fromEntries(
      Object.entries(source.header).map(([k, v]) => [k, v.join(", ")]),
    );
    const options: DeliveryOptions = {
      method: overrides.options.method ?? source.method,
      delayMs: overrides.options.delayMs ?? 0,
      retries: overrides.options.retries ?? source.maxRetries,
      timeoutMs: overrides.options.timeoutMs ?? source.timeoutMs,
      retryDelayExpression: overrides.options.retryDelayExpression ?? source.retryDelayExpression,
      forwardHeaders: { ...originalHeaders, ...overrides.options.forwardHeaders },
    };
    const message = this.createMessage(source.kind, source.url, source.body, options, source.callerIP, {
      callback: overrides.callback ?? source.callback,
      failureCallback: overrides.failureCallback ?? source.failureCallback,
      callbackOptions: source.callbackOptions,
      failureCallbackOptions: source.failureCallbackOptions,
      flowControl: source.flowControl,
      sourceMessageId: source.sourceMessageId,
      // A label is one of the message's headers, and a retry keeps "the same body and headers".
      labels: source.labels,
    });
    return { messageId: message.messageId, url: message.url };
  }

  deleteFromDlq(dlqId: string): boolean {
    const deleted = this.store.dlq.delete(dlqId);
    if (deleted) {
      this.persist((journal) => journal.dropDlq(dlqId));
      this.store.changed();
    }
    return deleted;
  }

  /** Forget everything (messages, DLQ, dedup keys, waiting deliveries); running attempts finish unrecorded. */
  reset(): void {
    this.scheduler.clear();
    for (const message of this.store.messages.values()) {
      if (message.state !== "DELIVERED" && message.state !== "ERROR") {
        message.state = "CANCELLED";
        message.version += 1;
      }
    }
    this.dedup.clear();
    this.store.clear();
    this.journal?.clear();
  }

  async close(): Promise<void> {
    this.abort.abort();
    await this.scheduler.close();
    this.agent.destroy();
    // Attempts cut short above were never written: they come back waiting.
    this.journal?.close();
  }

  private createMessage(
    kind: MessageKind,
    url: string,
    body: Buffer,
    options: DeliveryOptions,
    callerIP: string,
    extra: Partial<MessageRecord>,
  ): MessageRecord {
    const now = Date.now();
    // Upstash-Not-Before is an absolute time and wins over Upstash-Delay (publish docs);
    // only relative delays are compressed by timeScale.
    const readyAt = extra.notBefore ?? now + options.delayMs * this.config.timeScale;
    const message: MessageRecord = {
      ...extra,
      messageId: newMessageId(),
      seq: this.store.nextMessageSeq(),
      version: 0,
      kind,
      url,
      method: options.method,
      body,
      header: Object.fromEntries(Object.entries(options.forwardHeaders).map(([k, v]) => [k, [v]])),
      maxRetries: options.retries,
      timeoutMs: options.timeoutMs,
      retryDelayExpression: options.retryDelayExpression,
      createdAt: now,
      notBefore: extra.notBefore ?? now + options.delayMs,
      callerIP,
      state: "CREATED",
      retried: 0,
      readyAt,
      attempts: [],
    };
    this.store.add(message);
    // Written before anything answers with its id: a publish a killed process answered is
    // in the file. After the store has it: a compaction this write sets off keeps it.
    this.persist((journal) => journal.putMessage(message));
    this.scheduler.schedule(message);
    return message;
  }

  private async attempt(message: MessageRecord, startedAt: number): Promise<void> {
    if (message.state === "CANCELLED") return;
    const attempt: Attempt = { retried: message.retried, startedAt };
    message.state = "ACTIVE";
    message.attempts.push(attempt);
    this.store.changed(message);

    const headers: Record<string, string> = {};
    for (const [name, values] of Object.entries(message.header)) headers[name] = values.join(", ");
    Object.assign(headers, {
      "User-Agent": "Upstash-QStash",
      "Upstash-Message-Id": message.messageId,
      "Upstash-Retried": String(message.retried),
      "Upstash-Caller-Ip": message.callerIP,
      "Upstash-Signature": signJwt({ key: this.config.signingKey(), url: message.url, body: message.body }),
    });
    const result = await deliver({
      url: message.url,
      method: message.method,
      headers,
      body: message.body,
      timeoutMs: message.timeoutMs,
      signal: this.abort.signal,
      agent: this.agent,
    });
    if (this.abort.signal.aborted) return; // closing: leave the record as it was (ACTIVE)

    const now = Date.now();
    attempt.finishedAt = now;
    attempt.status = result.status;
    attempt.error = result.error;
    attempt.responseHeaders = result.headers;
    attempt.responseBody = result.body.toString("base64");
    this.logAttempt(message, attempt);

    // Re-read: a cancel or reset may have happened while the attempt was in flight.
    if ((message.state as MessageState) === "CANCELLED") {
      this.store.changed(message);
      return;
    }
    const ok = result.status !== undefined && result.status >= 200 && result.status < 300;
    // The callbacks docs: the callback "might be called multiple times for each retry until
    // the endpoint returns success or retries are exhausted", so every answered attempt reports.
    if (message.callback && result.status !== undefined)
      this.sendCallback(message, attempt, result, "callback");

    if (ok) {
      message.state = "DELIVERED";
    } else if (!isNonRetryable(result.status, result.headers) && message.retried < message.maxRetries) {
      const { delayMs, source } = nextRetryDelay(message, result.headers, now);
      attempt.nextRetryDelayMs = delayMs;
      attempt.nextRetryDelaySource = source;
      message.retried += 1;
      message.state = "RETRY";
      message.readyAt = now + attempt.nextRetryDelayMs * this.config.timeScale;
      this.scheduler.schedule(message);
    } else {
      this.moveToDlq(message, result, now);
    }
    this.persist((journal) => {
      journal.putMessage(message);
      if (message.state === "ERROR" && message.dlqId !== undefined) {
        journal.putDlq(this.store.dlq.get(message.dlqId)!);
      }
    });
    this.store.changed(message);
  }

  private moveToDlq(message: MessageRecord, result: DeliveryResult, now: number): void {
    message.state = "ERROR";
    const dlqId = this.store.nextDlqId(now);
    message.dlqId = dlqId;
    const entry: DlqEntry = {
      dlqId,
      message,
      createdAt: now,
      responseStatus: result.status,
      responseHeader: result.headers,
      responseBody: result.body.toString("base64"),
    };
    this.store.dlq.set(dlqId, entry);
    const last = message.attempts.at(-1);
    if (message.failureCallback && last) this.sendCallback(message, last, result, "failure-callback");
  }

  /**
   * "Callbacks publish a new message with the response to the callback URL" (callbacks
   * docs): a message of its own, signed for the callback URL and retried like any other.
   */
  private sendCallback(
    source: MessageRecord,
    attempt: Attempt,
    result: DeliveryResult,
    kind: MessageKind,
  ): void {
    const isFailure = kind === "failure-callback";
    const url = isFailure ? source.failureCallback : source.callback;
    const configured = isFailure ? source.failureCallbackOptions : source.callbackOptions;
    if (!url || !configured) return;
    const body = Buffer.from(JSON.stringify(buildCallbackBody(source, attempt, result, source.dlqId)));
    // Guess: the callback docs do not name the Content-Type of the callback body; it is JSON.
    const options: DeliveryOptions = {
      ...configured,
      forwardHeaders: { "Content-Type": "application/json", ...configured.forwardHeaders },
    };
    // Without the source's labels: QStash's docs do not say a callback carries them, so
    // code that finds callbacks by label would work here and perhaps not against QStash.
    this.createMessage(kind, url, body, options, source.callerIP, { sourceMessageId: source.messageId });
  }

  private logAttempt(message: MessageRecord, attempt: Attempt): void {
    const outcome =
      attempt.status !== undefined ? `status=${attempt.status}` : `error=${JSON.stringify(attempt.error)}`;
    const took = (attempt.finishedAt ?? attempt.startedAt) - attempt.startedAt;
    const kind = message.kind === "publish" ? "" : ` (${message.kind} for ${message.sourceMessageId})`;
    // What a refusal said, briefly: a soak's 503s in 8 ms had no line in the Worker's log
    // and their bodies were gone with the message, so whose answer it was (the Worker's,
    // or wrangler's proxy: "Your worker restarted mid-request") could not be told.
    const said =
      attempt.status !== undefined && attempt.status >= 400 && attempt.responseBody
        ? ` answered ${JSON.stringify(
            Buffer.from(attempt.responseBody, "base64")
              .toString("utf8")
              .replace(/\s+/g, " ")
              .trim()
              .slice(0, 160),
          )}`
        : "";
    this.config.log(
      `[qstash-dev] deliver ${message.messageId}${kind} ${message.method} ${message.url} retried=${attempt.retried}/${message.maxRetries} ${outcome} ${took}ms${said}`,
    );
  }
}
