-- The backend's tables and steps; New runs this file in one transaction with
-- {{s}} replaced by the schema name. Each step is one function that takes
-- the id's advisory lock, then reads the clock. Times are in microseconds.
CREATE SCHEMA IF NOT EXISTS {{s}};

-- One row per id: the lease (token NULL when free; expiry is the lease's end
-- or the release's time) and the documented counters: the last fence and
-- the token of the latest Release. sweep deletes it once idle.
CREATE TABLE IF NOT EXISTS {{s}}.ids (id bytea PRIMARY KEY, token bytea,
  expiry timestamptz NOT NULL, fence bigint NOT NULL, released bytea);
CREATE INDEX IF NOT EXISTS ids_expiry ON {{s}}.ids (expiry);

-- The queues, ordered by ticket; a waiter is dead once its deadline passed.
CREATE TABLE IF NOT EXISTS {{s}}.waiters (id bytea, ticket bigint, token bytea NOT NULL,
  deadline timestamptz NOT NULL, PRIMARY KEY (id, ticket), UNIQUE (id, token));
CREATE INDEX IF NOT EXISTS waiters_id_deadline ON {{s}}.waiters (id, deadline);
CREATE INDEX IF NOT EXISTS waiters_deadline ON {{s}}.waiters (deadline);
CREATE SEQUENCE IF NOT EXISTS {{s}}.tickets;

CREATE OR REPLACE FUNCTION {{s}}.us(d interval) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT ceil(extract(epoch FROM d) * 1000000)::bigint $$;

-- head returns the token of the lowest ticket whose deadline is after t.
CREATE OR REPLACE FUNCTION {{s}}.head(p_id bytea, t timestamptz) RETURNS bytea
LANGUAGE sql STABLE AS $$
  SELECT token FROM {{s}}.waiters WHERE id = p_id AND deadline > t ORDER BY ticket LIMIT 1
$$;

-- open starts a step: it takes the id's lock, reads the clock, locks the
-- id's row, frees an expired lease and purges up to p_limit dead waiters;
-- held and head_before are for finish.
CREATE OR REPLACE FUNCTION {{s}}.open(p_id bytea, p_limit int,
  OUT now_ts timestamptz, OUT held bool, OUT head_before bytea)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(('x' || substr(md5('{{s}}'::bytea || p_id), 1, 16))::bit(64)::bigint);
  now_ts := clock_timestamp();
  SELECT ids.token IS NOT NULL INTO held FROM {{s}}.ids WHERE id = p_id FOR UPDATE;
  held := coalesce(held, false);
  head_before := {{s}}.head(p_id, '-infinity');
  UPDATE {{s}}.ids SET token = NULL WHERE id = p_id AND token IS NOT NULL AND expiry <= now_ts;
  DELETE FROM {{s}}.waiters WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.waiters
    WHERE id = p_id AND deadline <= now_ts ORDER BY deadline LIMIT p_limit));
END $$;

-- finish ends a step: when the lock is free and has a live head, it wakes
-- that head if the step freed the lock or changed the head (or always, with
-- force). When the lock is held and the step changed the head, it wakes the
-- new head too: it re-checks, and so keeps a timer at the holder's TTL. It
-- returns the head when the lock is free.
CREATE OR REPLACE FUNCTION {{s}}.finish(p_id bytea, now_ts timestamptz, held bool, head_before bytea, force bool)
RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE h bytea;
BEGIN
  h := {{s}}.head(p_id, now_ts);
  IF EXISTS (SELECT FROM {{s}}.ids WHERE id = p_id AND token IS NOT NULL) THEN
    IF h IS NOT NULL AND h IS DISTINCT FROM head_before THEN
      PERFORM pg_notify('{{s}}', encode(p_id, 'hex') || ' ' || encode(h, 'hex'));
    END IF;
    RETURN NULL;
  END IF;
  IF h IS NOT NULL AND (held OR force OR h IS DISTINCT FROM head_before) THEN
    PERFORM pg_notify('{{s}}', encode(p_id, 'hex') || ' ' || encode(h, 'hex'));
  END IF;
  RETURN h;
END $$;

-- sweep deletes up to p_limit rows idle for p_idle: counter rows whose fence
-- is behind the clock (their id's next fence is the clock, still higher)
-- and long-dead waiters. It skips the rows a step has locked.
CREATE OR REPLACE FUNCTION {{s}}.sweep(now_ts timestamptz, p_idle interval, p_limit int)
RETURNS void LANGUAGE sql AS $$
  DELETE FROM {{s}}.ids WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.ids WHERE expiry < now_ts - p_idle
    AND fence < {{s}}.us(now_ts - 'epoch') LIMIT p_limit FOR UPDATE SKIP LOCKED));
  DELETE FROM {{s}}.waiters WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.waiters
    WHERE deadline < now_ts - p_idle LIMIT p_limit FOR UPDATE SKIP LOCKED));
$$;

-- acquire: the fair try-acquire with optional enqueue (checklist 1, 2, 7).
-- A grant's fence is greatest(last + 1, the clock): never going back.
CREATE OR REPLACE FUNCTION {{s}}.acquire(p_id bytea, p_token bytea, p_ttl bigint, p_wait bool,
  p_wttl bigint, p_max int, p_limit int, p_idle bigint,
  OUT o_acquired bool, OUT o_fence bigint, OUT o_ttl bigint, OUT o_holder_ttl bigint,
  OUT o_queued bool, OUT o_ticket bigint, OUT o_head bool, OUT o_full bool)
LANGUAGE plpgsql AS $$
DECLARE
  o record;
  r {{s}}.ids;
  w {{s}}.waiters;
  h bytea;
BEGIN
  o := {{s}}.open(p_id, p_limit);
  o_acquired := false; o_fence := 0; o_ttl := 0; o_holder_ttl := 0;
  o_queued := false; o_ticket := 0; o_head := false; o_full := false;
  SELECT * INTO r FROM {{s}}.ids WHERE id = p_id;
  IF r.token = p_token THEN -- a retried grant: report the lease as it is (S6)
    o_acquired := true; o_fence := r.fence; o_ttl := {{s}}.us(r.expiry - o.now_ts);
    RETURN;
  END IF;
  -- A dead entry the purge LIMIT left in place is never granted or refreshed.
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token AND deadline <= o.now_ts;
  SELECT * INTO w FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
  h := {{s}}.head(p_id, o.now_ts);
  IF r.token IS NULL AND (h IS NULL OR h = p_token) THEN
    DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
    INSERT INTO {{s}}.ids VALUES (p_id, p_token, o.now_ts + p_ttl * interval '1 microsecond',
      {{s}}.us(o.now_ts - 'epoch')) ON CONFLICT (id) DO UPDATE SET token = excluded.token,
      expiry = excluded.expiry, fence = greatest(ids.fence + 1, excluded.fence) RETURNING fence INTO o_fence;
    IF r.id IS NULL THEN
      PERFORM {{s}}.sweep(o.now_ts, p_idle * interval '1 microsecond', 8);
    END IF;
    o_acquired := true; o_ttl := p_ttl;
    -- The next waiter, if any, is the head now: finish wakes it.
    PERFORM {{s}}.finish(p_id, o.now_ts, o.held, p_token, false);
    RETURN;
  END IF;
  o_holder_ttl := CASE WHEN r.token IS NULL THEN 0 ELSE greatest(1, {{s}}.us(r.expiry - o.now_ts)) END;
  IF p_wait THEN
    IF w.token IS NOT NULL THEN
      UPDATE {{s}}.waiters SET deadline = o.now_ts + p_wttl * interval '1 microsecond'
        WHERE id = p_id AND token = p_token;
    ELSIF (SELECT count(*) FROM {{s}}.waiters WHERE id = p_id AND deadline > o.now_ts) >= p_max THEN
      o_full := true;
    ELSE
      INSERT INTO {{s}}.waiters VALUES (p_id, nextval('{{s}}.tickets'), p_token,
        o.now_ts + p_wttl * interval '1 microsecond') RETURNING * INTO w;
    END IF;
  END IF;
  IF w.token IS NOT NULL THEN
    o_queued := true; o_ticket := w.ticket;
    o_head := {{s}}.head(p_id, o.now_ts) = p_token;
  END IF;
  -- A requester that became the head knows it from the reply: not woken.
  PERFORM {{s}}.finish(p_id, o.now_ts, o.held, CASE WHEN o_head THEN p_token ELSE o.head_before END, false);
END $$;

-- release: compare-and-delete, then wake the head (checklist 3, 7). The
-- token of the latest Release is kept, so that the same release sent again
-- (its reply lost) is answered true; it never touches another's lease.
CREATE OR REPLACE FUNCTION {{s}}.release(p_id bytea, p_token bytea, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit);
  ok bool;
BEGIN
  UPDATE {{s}}.ids SET token = NULL, expiry = o.now_ts, released = p_token
    WHERE id = p_id AND token = p_token;
  ok := FOUND OR EXISTS (SELECT FROM {{s}}.ids WHERE id = p_id AND token IS NULL AND released = p_token);
  PERFORM {{s}}.finish(p_id, o.now_ts, o.held, o.head_before, false);
  RETURN ok;
END $$;

-- extend: compare-and-set of a live lease's expiry (checklist 4); open has
-- already freed an expired one, so it is never revived.
CREATE OR REPLACE FUNCTION {{s}}.extend(p_id bytea, p_token bytea, p_ttl bigint, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit);
  ok bool;
BEGIN
  UPDATE {{s}}.ids SET expiry = o.now_ts + p_ttl * interval '1 microsecond'
    WHERE id = p_id AND token = p_token;
  ok := FOUND;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.held, o.head_before, false);
  RETURN ok;
END $$;

-- leave: remove the token's entry and release a lease it holds (a grant
-- that raced a cancel), then wake the new head (checklist 5, 7). It reports
-- whether it released a lease.
CREATE OR REPLACE FUNCTION {{s}}.leave(p_id bytea, p_token bytea, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit);
  freed bool;
BEGIN
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
  UPDATE {{s}}.ids SET token = NULL, expiry = o.now_ts WHERE id = p_id AND token = p_token;
  freed := FOUND;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.held, o.head_before, false);
  RETURN freed;
END $$;

-- heartbeat: refresh a live entry (never re-adding one), wake the head if
-- the lock is free (with p_wake), and report whether the entry is queued and is the head
-- of a free lock (checklist 6, 7).
CREATE OR REPLACE FUNCTION {{s}}.heartbeat(p_id bytea, p_token bytea, p_wttl bigint, p_limit int,
  p_wake bool, OUT o_queued bool, OUT o_ready bool)
LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit);
  h bytea;
BEGIN
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token AND deadline <= o.now_ts;
  UPDATE {{s}}.waiters SET deadline = o.now_ts + p_wttl * interval '1 microsecond'
    WHERE id = p_id AND token = p_token;
  o_queued := FOUND;
  h := {{s}}.finish(p_id, o.now_ts, o.held, o.head_before, p_wake);
  o_ready := o_queued AND coalesce(h = p_token, false);
END $$;
