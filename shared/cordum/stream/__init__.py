"""cordum-stream: Cordum's live event stream, as a service of its own.

Bus messages (jobs, heartbeats, audits, alerts, workflow runs) become events that
clients follow over WebSocket or Server-Sent Events, each tenant seeing its own, and
resume after a disconnect without a gap or a repeat.

    writer.py      taps (NATS queue group): read, enrich, log once, publish to replicas
    frames.py      a bus message's type and frame (protojson), and its pointers
    jobmeta.py     the writer's reads of a job's meta (tenant, the platform's decision)
    eventlog.py    the tenants' logs in Redis (append once, replay, gaps); lua/
    events.py      an event, its ids, its encodings, the client filters
    hub.py         each replica's fan-out, in each tenant's log order
    session.py     one client's stream: order, buffer, keepalive, key recheck
    transports.py  WebSocket messages and SSE
    keys.py        who the caller is (the gateway's keys and tenant rules)
    job_view.py    the per-job stream's first event (the gateway's job detail)
    app.py         routes, checks, errors       service.py  the process
    settings.py    STREAM_* settings             counters.py metrics (EMF)
"""
