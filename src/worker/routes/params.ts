import { validator } from "hono/validator";
import { z } from "zod";
import { ApiError } from "../errors.ts";

const uuid = z.guid();

/**
 * An `:id` path parameter. Anything that is not a uuid cannot name an entity, so
 * it answers the same 404 an unknown uuid does (and never reaches Postgres,
 * which would reject it as a type error).
 */
export function idParam(entity: string) {
  return validator("param", (params: Record<string, string>) => {
    const id = params.id ?? "";
    if (!uuid.safeParse(id).success) throw new ApiError("NOT_FOUND", `${entity} ${id} not found`);
    return { id };
  });
}
