CREATE TABLE "sweep_runs" (
	"id" smallint PRIMARY KEY DEFAULT 1 NOT NULL,
	"finished_at" timestamp with time zone,
	"duration_ms" integer,
	"retention_days" integer,
	"failed_at" timestamp with time zone,
	"failure" text,
	CONSTRAINT "sweep_runs_singleton" CHECK ("sweep_runs"."id" = 1)
);
