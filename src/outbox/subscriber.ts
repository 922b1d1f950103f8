import { z } from "zod";
import { queryFailureText } from "./errors.ts";
import type { JobBody } from "./types.ts";

/** A job that can never succeed (the subject is gone for good, the input is invalid): QStash must not retry it. */
export class NonRetryableError extends Error {
  override readonly name = "NonRetryableError";
}

export interface JobContext {
  /** QStash's message id: the same on every retry of this job. */
  messageId: string;
  /** 0 on the first delivery. */
  retried: number;
}

export type JobHandler = (job: JobBody, context: JobContext) => Promise<void>;

/**
 * How a job ended, in the terms QStash acts on: done, failed but worth another
 * delivery (`retry`), or failed for good. The Worker turns it into an answer.
 */
export type JobOutcome = { done: true } | JobFailure;
export interface JobFailure {
  done: false;
  retry: boolean;
  message: string;
}

/**
 * Runs a handler once. Retries have one owner (QStash): a handler never loops,
 * it fails and lets QStash come back.
 */
export async function runJob(handler: JobHandler, job: JobBody, context: JobContext): Promise<JobOutcome> {
  try {
    await handler(job, context);
    return { done: true };
  } catch (error) {
    return jobFailure(error);
  }
}

/** A NonRetryableError will fail the same way on every delivery; anything else may pass next time. */
export function jobFailure(error: unknown): JobFailure {
  // The answer QStash keeps, and the failure callback records for the dashboard: a
  // failed query's parameters (a note's text) must not ride along.
  const message = queryFailureText(error) ?? (error instanceof Error ? error.message : String(error));
  return { done: false, retry: !(error instanceof NonRetryableError), message };
}

const jobBodySchema = z.object({
  subscription: z.string(),
  event: z.object({
    id: z.string().uuid(),
    seq: z.number().int(),
    type: z.string(),
    subject: z.string(),
    scope: z.string().nullable(),
    payload: z.unknown(),
    createdAt: z.string(),
  }),
  coalesced: z.array(z.string()),
});

/** Checks the shape of a verified job body; a malformed one can never succeed, so it is not retried. */
export function parseJobBody(raw: string): JobBody {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new NonRetryableError("job body is not JSON");
  }
  const parsed = jobBodySchema.safeParse(value);
  if (!parsed.success) {
    const where = parsed.error.issues.map((i) => i.path.join(".") || "(body)").join(", ");
    throw new NonRetryableError(`job body is not an edge-outbox job (bad: ${where})`);
  }
  return parsed.data as JobBody;
}
