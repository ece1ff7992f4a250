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
-- ttl is the lease TTL it asked for (a hand-off grants it), channel the
-- NOTIFY channel of its process, since when it queued (for Inspect).
CREATE TABLE IF NOT EXISTS {{s}}.waiters (id bytea, ticket bigint, token bytea NOT NULL,
  deadline timestamptz NOT NULL, ttl bigint NOT NULL, channel text NOT NULL,
  since timestamptz NOT NULL, PRIMARY KEY (id, ticket), UNIQUE (id, token));
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

-- wake sends a wake-up of the waiter p_token to its process's channel:
-- "hex(id) hex(token) holder_ttl fence ttl store_time" (fence 0: no grant).
CREATE OR REPLACE FUNCTION {{s}}.wake(p_channel text, p_id bytea, p_token bytea,
  p_holder_ttl bigint, p_fence bigint, p_ttl bigint, now_ts timestamptz) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_notify(p_channel, concat_ws(' ', encode(p_id, 'hex'), encode(p_token, 'hex'),
    p_holder_ttl, p_fence, p_ttl, {{s}}.us(now_ts - 'epoch')))
$$;

-- lease_to sets the lock to p_token for p_ttl from now_ts and returns its
-- fence: greatest(last fence + 1, the clock), so fences never go back.
CREATE OR REPLACE FUNCTION {{s}}.lease_to(p_id bytea, p_token bytea, p_ttl bigint, now_ts timestamptz)
RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO {{s}}.ids VALUES (p_id, p_token, now_ts + p_ttl * interval '1 microsecond',
    {{s}}.us(now_ts - 'epoch')) ON CONFLICT (id) DO UPDATE SET token = excluded.token,
    expiry = excluded.expiry, fence = greatest(ids.fence + 1, excluded.fence) RETURNING fence
$$;

-- hand_off grants a free lock to its live head (direct hand-off), unless the
-- head is self (the step's requester, which its own step grants): the TTL
-- the head asked for, the next fence, its row removed, and a wake-up that
-- carries the grant. It returns the token it granted, or NULL.
CREATE OR REPLACE FUNCTION {{s}}.hand_off(p_id bytea, now_ts timestamptz, self bytea)
RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE w {{s}}.waiters;
BEGIN
  IF EXISTS (SELECT FROM {{s}}.ids WHERE id = p_id AND token IS NOT NULL) THEN
    RETURN NULL;
  END IF;
  SELECT * INTO w FROM {{s}}.waiters WHERE id = p_id AND deadline > now_ts ORDER BY ticket LIMIT 1;
  IF w.token IS NULL OR w.token = self THEN
    RETURN NULL;
  END IF;
  DELETE FROM {{s}}.waiters WHERE id = p_id AND ticket = w.ticket;
  PERFORM {{s}}.wake(w.channel, p_id, w.token, 0, {{s}}.lease_to(p_id, w.token, w.ttl, now_ts), w.ttl, now_ts);
  RETURN w.token;
END $$;

-- open starts a step: it takes the id's lock, reads the clock, locks the
-- id's row, frees an expired lease, purges up to p_limit dead waiters and
-- hands a free lock off (see hand_off). head_before (the first row, live or
-- dead) is for finish; granted is the token it handed the lock to.
CREATE OR REPLACE FUNCTION {{s}}.open(p_id bytea, p_limit int, self bytea,
  OUT now_ts timestamptz, OUT head_before bytea, OUT granted bytea)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(('x' || substr(md5('{{s}}'::bytea || p_id), 1, 16))::bit(64)::bigint);
  now_ts := clock_timestamp();
  PERFORM FROM {{s}}.ids WHERE id = p_id FOR UPDATE;
  head_before := {{s}}.head(p_id, '-infinity');
  UPDATE {{s}}.ids SET token = NULL WHERE id = p_id AND token IS NOT NULL AND expiry <= now_ts;
  DELETE FROM {{s}}.waiters WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.waiters
    WHERE id = p_id AND deadline <= now_ts ORDER BY deadline LIMIT p_limit));
  granted := {{s}}.hand_off(p_id, now_ts, self);
END $$;

-- finish ends a step: it hands a free lock off (see hand_off), and when the
-- first row of the queue changed while the lock is held, it tells the live
-- head (unless it is self: the step's reply tells it) the holder's TTL, so
-- that it keeps a timer for a lease that ends without a release.
CREATE OR REPLACE FUNCTION {{s}}.finish(p_id bytea, now_ts timestamptz, head_before bytea, self bytea)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  r {{s}}.ids;
  w {{s}}.waiters;
BEGIN
  PERFORM {{s}}.hand_off(p_id, now_ts, self);
  SELECT * INTO r FROM {{s}}.ids WHERE id = p_id AND token IS NOT NULL;
  SELECT * INTO w FROM {{s}}.waiters WHERE id = p_id AND deadline > now_ts ORDER BY ticket LIMIT 1;
  IF r.token IS NOT NULL AND w.token IS NOT NULL AND w.token IS DISTINCT FROM self
      AND {{s}}.head(p_id, '-infinity') IS DISTINCT FROM head_before THEN
    PERFORM {{s}}.wake(w.channel, p_id, w.token, greatest(1, {{s}}.us(r.expiry - now_ts)), 0, 0, now_ts);
  END IF;
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

-- acquire: the fair try-acquire with optional enqueue (checklist 1, 2, 7,
-- 14). A waiter records the lease TTL it asks for and p_channel, where its
-- process listens. o_now is the server's clock (Grant.StoreTime).
CREATE OR REPLACE FUNCTION {{s}}.acquire(p_id bytea, p_token bytea, p_ttl bigint, p_wait bool,
  p_wttl bigint, p_max int, p_limit int, p_idle bigint, p_channel text,
  OUT o_acquired bool, OUT o_fence bigint, OUT o_ttl bigint, OUT o_holder_ttl bigint,
  OUT o_queued bool, OUT o_ticket bigint, OUT o_head bool, OUT o_full bool, OUT o_now bigint)
LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, p_token);
  r {{s}}.ids;
  w {{s}}.waiters;
  h bytea;
BEGIN
  o_acquired := false; o_fence := 0; o_ttl := 0; o_holder_ttl := 0;
  o_queued := false; o_ticket := 0; o_head := false; o_full := false;
  o_now := {{s}}.us(o.now_ts - 'epoch');
  SELECT * INTO r FROM {{s}}.ids WHERE id = p_id;
  -- A dead entry the purge LIMIT left in place is never granted or refreshed.
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token AND deadline <= o.now_ts;
  SELECT * INTO w FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
  h := {{s}}.head(p_id, o.now_ts);
  IF r.token = p_token THEN -- a retried grant: report the lease as it is (S6)
    o_acquired := true; o_fence := r.fence; o_ttl := {{s}}.us(r.expiry - o.now_ts);
  ELSIF r.token IS NULL AND (h IS NULL OR h = p_token) THEN
    DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
    o_acquired := true; o_ttl := p_ttl;
    o_fence := {{s}}.lease_to(p_id, p_token, p_ttl, o.now_ts);
    IF r.id IS NULL THEN
      PERFORM {{s}}.sweep(o.now_ts, p_idle * interval '1 microsecond', 8);
    END IF;
  ELSE
    o_holder_ttl := CASE WHEN r.token IS NULL THEN 0 ELSE greatest(1, {{s}}.us(r.expiry - o.now_ts)) END;
    IF p_wait AND w.token IS NOT NULL THEN
      UPDATE {{s}}.waiters SET deadline = o.now_ts + p_wttl * interval '1 microsecond', ttl = p_ttl,
        channel = p_channel WHERE id = p_id AND token = p_token;
    ELSIF p_wait AND (SELECT count(*) FROM {{s}}.waiters WHERE id = p_id AND deadline > o.now_ts) >= p_max THEN
      o_full := true;
    ELSIF p_wait THEN
      INSERT INTO {{s}}.waiters (id, ticket, token, deadline, ttl, channel, since)
        VALUES (p_id, nextval('{{s}}.tickets'), p_token, o.now_ts + p_wttl * interval '1 microsecond',
        p_ttl, p_channel, o.now_ts) RETURNING * INTO w;
    END IF;
    IF w.token IS NOT NULL THEN
      o_queued := true; o_ticket := w.ticket; o_head := {{s}}.head(p_id, o.now_ts) = p_token;
    END IF;
  END IF;
  -- The next waiter, if a grant or a purge made it the head, is told.
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, p_token);
END $$;

-- release: compare-and-delete, then hand off (checklist 3, 14). The token
-- of the latest Release is kept, so that the same release sent again (its
-- reply lost) is answered true while the lock stays free.
CREATE OR REPLACE FUNCTION {{s}}.release(p_id bytea, p_token bytea, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, NULL);
  ok bool;
BEGIN
  UPDATE {{s}}.ids SET token = NULL, expiry = o.now_ts, released = p_token
    WHERE id = p_id AND token = p_token;
  ok := FOUND OR EXISTS (SELECT FROM {{s}}.ids WHERE id = p_id AND token IS NULL AND released = p_token);
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL);
  RETURN ok;
END $$;

-- extend: compare-and-set of a live lease's expiry (checklist 4); open has
-- already freed (and handed off) an expired one, so it is never revived.
CREATE OR REPLACE FUNCTION {{s}}.extend(p_id bytea, p_token bytea, p_ttl bigint, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, NULL);
  ok bool;
BEGIN
  UPDATE {{s}}.ids SET expiry = o.now_ts + p_ttl * interval '1 microsecond'
    WHERE id = p_id AND token = p_token;
  ok := FOUND;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL);
  RETURN ok;
END $$;

-- leave: remove the token's entry and release a lease it holds (a grant
-- that raced a cancel), then hand off (checklist 5, 14). open does not hand
-- the lock to the leaving token.
CREATE OR REPLACE FUNCTION {{s}}.leave(p_id bytea, p_token bytea, p_limit int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, p_token);
BEGIN
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
  UPDATE {{s}}.ids SET token = NULL, expiry = o.now_ts WHERE id = p_id AND token = p_token;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL);
END $$;

-- heartbeat: refresh a live entry, never reviving a dead one (checklist 6).
-- A waiter granted by this very step (open handed it the lock) is reported
-- queued: its wake-up carries the grant. A free lock is always handed off,
-- so no waiter is ever "ready".
CREATE OR REPLACE FUNCTION {{s}}.heartbeat(p_id bytea, p_token bytea, p_wttl bigint, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, NULL);
  queued bool;
BEGIN
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token AND deadline <= o.now_ts;
  UPDATE {{s}}.waiters SET deadline = o.now_ts + p_wttl * interval '1 microsecond'
    WHERE id = p_id AND token = p_token;
  queued := FOUND OR o.granted IS NOT DISTINCT FROM p_token;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL);
  RETURN queued;
END $$;

-- inspect: a read-only view of one id (no lock, no write): the live lease
-- and the live waiters, the first p_max of them listed head first.
-- PostgreSQL has no sha1(), so Go computes the tokens' fingerprints.
CREATE OR REPLACE FUNCTION {{s}}.inspect(p_id bytea, p_max int, OUT o_fence bigint, OUT o_ttl bigint,
  OUT o_holder bytea, OUT o_len int, OUT o_tickets bigint[], OUT o_tokens bytea[], OUT o_since bigint[],
  OUT o_deadlines bigint[])
LANGUAGE sql AS $$
  WITH n AS (SELECT clock_timestamp() AS t),
  w AS (SELECT q.* FROM {{s}}.waiters q, n WHERE id = p_id AND deadline > n.t),
  f AS (SELECT * FROM w ORDER BY ticket LIMIT p_max)
  SELECT l.fence, {{s}}.us(l.expiry - n.t), l.token, (SELECT count(*)::int FROM w),
    ARRAY(SELECT ticket FROM f ORDER BY ticket), ARRAY(SELECT token FROM f ORDER BY ticket),
    ARRAY(SELECT {{s}}.us(n.t - since) FROM f ORDER BY ticket),
    ARRAY(SELECT {{s}}.us(deadline - n.t) FROM f ORDER BY ticket)
  FROM n LEFT JOIN {{s}}.ids l ON l.id = p_id AND l.token IS NOT NULL AND l.expiry > n.t
$$;
