import { activateSupplier } from "../../domain/suppliers/activate.ts";
import type { App } from "../new-app.ts";
import { noBody } from "../validate.ts";
import { answerWrite } from "../respond.ts";
import { ID } from "./params.ts";

export function registerSuppliersActivate(app: App) {
  app.post(`/suppliers/${ID}/activate`, noBody, async (c) => {
    return answerWrite(c, null, async (db) => {
      const { supplier, eventIds } = await activateSupplier(db, c.req.param("id"), c.var.tenant);
      return { result: { supplier }, eventIds };
    });
  });
}
