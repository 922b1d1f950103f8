/**
 * Domain failures the caller can act on, as a closed set. Transports map each code
 * to their own vocabulary (HTTP status, CLI exit code); anything else thrown by a
 * use case is a bug or an outage, not a domain answer.
 */
export type DomainErrorCode = "not_found" | "illegal_transition";

export class DomainError extends Error {
  constructor(
    readonly code: DomainErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "DomainError";
  }
}

export class NotFoundError extends DomainError {
  constructor(entity: string, id: string) {
    super("not_found", `${entity} ${id} not found`);
  }
}

export class IllegalTransitionError extends DomainError {
  constructor(
    entity: string,
    id: string,
    readonly from: string,
    readonly action: string,
    why: string,
  ) {
    super("illegal_transition", `cannot ${action} ${entity} ${id}: it is ${from}; ${why}`);
  }
}
