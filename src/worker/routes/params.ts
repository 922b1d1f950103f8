import { validator } from "hono/validator";
import { z } from "zod";
import { SUBSCRIPTION_NAME, UUID_PATTERN } from "../../outbox/index.ts";
import { ApiError } from "../errors.ts";

/**
 * Path parameters constrained by pattern, so a literal sibling (`/notes/search`,
 * `/jobs/_failed`) can never be taken for one and registration order does not
 * matter. A segment that does not match is no route: 404, and it never reaches
 * Postgres (which would reject a non-uuid as a type error).
 */
export const ID = `:id{${UUID_PATTERN}}` as const;
export const SUBSCRIPTION = `:subscription{${SUBSCRIPTION_NAME}}` as const;

const uuid = z.guid();

/**
 * An `:id` path parameter checked by a validator instead of the route pattern:
 * anything that is not a uuid answers the same 404 an unknown uuid does.
 */
export function idParam(entity: string) {
  return validator("param", (params: Record<string, string>) => {
    const id = params.id ?? "";
    // The id is not repeated: these are dashboard pages, where a link must not be able
    // to put words of its own on an operator's page (ADR 0009); a uuid could carry none.
    if (!uuid.safeParse(id).success)
      throw new ApiError("NOT_FOUND", `no such ${entity}: its id is not a UUID`);
    return { id };
  });
}
