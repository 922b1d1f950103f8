/**
 * The mail capability: an interface, the HTTP implementation the Worker uses when
 * MAIL_API_URL is set, and a no-op one for deployments without mail. Edge-safe:
 * fetch only.
 */
export interface Mail {
  to: string;
  subject: string;
  text: string;
}

export interface Mailer {
  /**
   * Sends one mail. `idempotencyKey` is the same on every attempt for the same
   * logical mail, so a provider that honours it drops a resend after a crash.
   */
  send(mail: Mail, options: { idempotencyKey: string }): Promise<{ providerMessageId: string | null }>;
}

/** A failed send; `retry` says whether trying again later can help (outage vs. rejected mail). */
export class MailError extends Error {
  constructor(
    message: string,
    readonly retry: boolean,
  ) {
    super(message);
    this.name = "MailError";
  }
}

export function httpMailer(options: { url: string; timeoutMs?: number; fetch?: typeof fetch }): Mailer {
  const doFetch = options.fetch ?? fetch;
  return {
    async send(mail, { idempotencyKey }) {
      let res: Response;
      try {
        res = await doFetch(options.url, {
          method: "POST",
          headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
          body: JSON.stringify(mail),
          // A handler must answer QStash well within its timeout; a stuck provider is an outage.
          signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
        });
      } catch (error) {
        throw new MailError(`mail API unreachable: ${(error as Error).message}`, true);
      }
      const text = await res.text();
      if (!res.ok) {
        // 408/429 and 5xx are the provider's trouble; any other 4xx is this mail's.
        const retry = res.status >= 500 || res.status === 408 || res.status === 429;
        const said = text.trim() ? `: ${text.slice(0, 200)}` : " with an empty body";
        throw new MailError(`mail API answered ${res.status}${said}`, retry);
      }
      return { providerMessageId: messageId(text) };
    },
  };
}

export const noopMailer: Mailer = {
  async send(mail) {
    console.log(`mail (not sent, no MAIL_API_URL): to ${mail.to}: ${mail.subject}`);
    return { providerMessageId: null };
  },
};

function messageId(text: string): string | null {
  try {
    const id = (JSON.parse(text) as { id?: unknown }).id;
    return typeof id === "string" ? id : null;
  } catch {
    return null;
  }
}
