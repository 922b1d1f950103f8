CREATE TABLE "corpus_index" (
	"note_id" uuid PRIMARY KEY NOT NULL,
	"scope" text,
	"title" text NOT NULL,
	"document" "tsvector" NOT NULL,
	"source_event_seq" bigint NOT NULL,
	"indexed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "job_failures" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "job_failures_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"message_id" text NOT NULL,
	"subscription" text NOT NULL,
	"event_id" uuid,
	"status" integer,
	"body" text NOT NULL,
	"response_body" text,
	"received_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "job_failures_message_id_unique" UNIQUE("message_id")
);
--> statement-breakpoint
CREATE TABLE "mail_sends" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "mail_sends_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"subscription" text NOT NULL,
	"event_id" uuid NOT NULL,
	"recipient" text NOT NULL,
	"subject_line" text NOT NULL,
	"provider_message_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"sent_at" timestamp with time zone,
	CONSTRAINT "mail_sends_subscription_event_key" UNIQUE("subscription","event_id")
);
--> statement-breakpoint
CREATE INDEX "corpus_index_document_idx" ON "corpus_index" USING gin ("document");--> statement-breakpoint
CREATE INDEX "corpus_index_scope_idx" ON "corpus_index" USING btree ("scope");--> statement-breakpoint
CREATE INDEX "job_failures_received_at_idx" ON "job_failures" USING btree ("received_at");