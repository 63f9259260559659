-- The example's jobs table (README.md): one row per job, the queue it waits in, and the
-- Kubernetes workload (namespace, Deployment) that runs it. The tests create it from this file.
CREATE TABLE jobs (
    id         bigserial   PRIMARY KEY,
    queue      text        NOT NULL,
    state      text        NOT NULL CHECK (state IN ('pending', 'running', 'done', 'failed')),
    namespace  text        NOT NULL,  -- the namespace of the Deployment that runs the job
    owner      text        NOT NULL,  -- that Deployment's name
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The metrics count pending jobs by queue and by (namespace, owner): partial indexes keep those
-- counts cheap however many finished jobs the table keeps.
CREATE INDEX jobs_pending_by_queue ON jobs (queue) WHERE state = 'pending';
CREATE INDEX jobs_pending_by_owner ON jobs (namespace, owner) WHERE state = 'pending';

-- The server connects as a role that can only read this table.
-- CREATE ROLE metrics_reader LOGIN PASSWORD '...';
-- GRANT SELECT ON jobs TO metrics_reader;
