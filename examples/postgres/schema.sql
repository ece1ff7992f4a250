-- The backend's tables and steps; New runs this file in one transaction with
-- {{s}} replaced by the schema name. Each step is one function that takes
-- the id's advisory lock, then reads the clock. Times are in microseconds.
CREATE SCHEMA IF NOT EXISTS {{s}};

-- One row per id: the lease of a mutex (token NULL when free; expiry is the
-- lease's end or the release's time), the documented counters (the last
-- fence and the token of the latest Release) and the capacity of a shared
-- id (NULL for a mutex; see holders). sweep deletes it once idle.
CREATE TABLE IF NOT EXISTS {{s}}.ids (id bytea PRIMARY KEY, token bytea,
  expiry timestamptz NOT NULL, fence bigint NOT NULL, released bytea, capacity bigint);
CREATE INDEX IF NOT EXISTS ids_expiry ON {{s}}.ids (expiry);

-- The queues, ordered by ticket; a waiter is dead once its deadline passed.
-- ttl is the lease TTL it asked for (a hand-off grants it), channel the
-- NOTIFY channel of its process, since when it queued (for Inspect),
-- permits how many it asks for on a shared id (0 on a mutex).
CREATE TABLE IF NOT EXISTS {{s}}.waiters (id bytea, ticket bigint, token bytea NOT NULL,
  deadline timestamptz NOT NULL, ttl bigint NOT NULL, channel text NOT NULL,
  since timestamptz NOT NULL, permits bigint NOT NULL DEFAULT 0, PRIMARY KEY (id, ticket), UNIQUE (id, token));
CREATE INDEX IF NOT EXISTS waiters_id_deadline ON {{s}}.waiters (id, deadline);
CREATE INDEX IF NOT EXISTS waiters_deadline ON {{s}}.waiters (deadline);
CREATE SEQUENCE IF NOT EXISTS {{s}}.tickets;

-- Shared ids (backend.Sharer): an ids row whose capacity is set (2 or
-- more; NULL for a mutex) has no token; its leases are rows here, each
-- with its own expiry, fence and permits. The row's expiry is then the
-- latest end of a lease, for sweep. The capacity counts while the id has a
-- live lease or a live waiter; once it has neither, the id is idle and the
-- capacity forgotten: the next request sets its own (a mutex's NULL
-- included) and Inspect shows none.
CREATE TABLE IF NOT EXISTS {{s}}.holders (id bytea, token bytea, expiry timestamptz NOT NULL,
  fence bigint NOT NULL, permits bigint NOT NULL, PRIMARY KEY (id, token));
CREATE INDEX IF NOT EXISTS holders_expiry ON {{s}}.holders (expiry);

-- Migration of a schema made before shared ids: the two columns are added
-- (a catalog change only) when missing, and the functions whose results
-- changed are dropped, once, to be made anew below (acquire keeps its old
-- signature too, for the processes not upgraded yet). ALTER TABLE is run
-- only when needed: it locks the table against every step.
DO $$
DECLARE f regprocedure;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '{{s}}.ids'::regclass
      AND attname = 'capacity' AND NOT attisdropped) THEN
    ALTER TABLE {{s}}.ids ADD COLUMN capacity bigint;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '{{s}}.waiters'::regclass
      AND attname = 'permits' AND NOT attisdropped) THEN
    ALTER TABLE {{s}}.waiters ADD COLUMN permits bigint NOT NULL DEFAULT 0;
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = '{{s}}'::regnamespace
      AND ((p.proname = 'open' AND NOT 'cap' = ANY (p.proargnames))
        OR (p.proname = 'inspect' AND NOT 'o_cap' = ANY (p.proargnames))
        OR (p.proname = 'finish' AND p.pronargs = 4)) LOOP
    EXECUTE 'DROP FUNCTION ' || f;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION {{s}}.us(d interval) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT ceil(extract(epoch FROM d) * 1000000)::bigint $$;

-- head returns the token of the lowest ticket whose deadline is after t.
-- The steps' helpers that read or write tables are PL/pgSQL, whose plans
-- a session keeps, rather than SQL functions, which the steps would plan
-- anew in every transaction.
CREATE OR REPLACE FUNCTION {{s}}.head(p_id bytea, t timestamptz) RETURNS bytea
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT token FROM {{s}}.waiters WHERE id = p_id AND deadline > t ORDER BY ticket LIMIT 1);
END $$;

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
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE f bigint;
BEGIN
  INSERT INTO {{s}}.ids VALUES (p_id, p_token, now_ts + p_ttl * interval '1 microsecond',
    {{s}}.us(now_ts - 'epoch')) ON CONFLICT (id) DO UPDATE SET token = excluded.token,
    expiry = excluded.expiry, fence = greatest(ids.fence + 1, excluded.fence) RETURNING fence INTO f;
  RETURN f;
END $$;

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

-- used returns the permits of the live leases of a shared id.
CREATE OR REPLACE FUNCTION {{s}}.used(p_id bytea, now_ts timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT coalesce(sum(permits), 0) FROM {{s}}.holders WHERE id = p_id AND expiry > now_ts);
END $$;

-- share_to adds a lease of p_permits to the shared id p_id for p_token, for
-- p_ttl from now_ts, and returns its fence (every grant takes a new one, as
-- lease_to's). A grant ends the keeping of the latest Release's token.
CREATE OR REPLACE FUNCTION {{s}}.share_to(p_id bytea, p_token bytea, p_ttl bigint, p_permits bigint,
  now_ts timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  until timestamptz := now_ts + p_ttl * interval '1 microsecond';
  f bigint;
BEGIN
  UPDATE {{s}}.ids SET fence = greatest(fence + 1, {{s}}.us(now_ts - 'epoch')), released = NULL,
    expiry = greatest(expiry, until) WHERE id = p_id RETURNING fence INTO f;
  INSERT INTO {{s}}.holders VALUES (p_id, p_token, until, f, p_permits)
    ON CONFLICT (id, token) DO UPDATE SET expiry = excluded.expiry, fence = excluded.fence,
    permits = excluded.permits;
  RETURN f;
END $$;

-- shared_hand_off is hand_off on a shared id of capacity cap: it grants the
-- live heads in ticket order while their permits fit, each with its own
-- fence and wake-up, and stops at the first that does not fit or is self.
-- It returns the tokens it granted.
CREATE OR REPLACE FUNCTION {{s}}.shared_hand_off(p_id bytea, now_ts timestamptz, self bytea, cap bigint)
RETURNS bytea[] LANGUAGE plpgsql AS $$
DECLARE
  w {{s}}.waiters;
  used bigint := {{s}}.used(p_id, now_ts);
  granted bytea[] := '{}';
BEGIN
  FOR w IN SELECT * FROM {{s}}.waiters WHERE id = p_id AND deadline > now_ts ORDER BY ticket LOOP
    EXIT WHEN w.token = self OR used + w.permits > cap;
    DELETE FROM {{s}}.waiters WHERE id = p_id AND ticket = w.ticket;
    PERFORM {{s}}.wake(w.channel, p_id, w.token, 0,
      {{s}}.share_to(p_id, w.token, w.ttl, w.permits, now_ts), w.ttl, now_ts);
    used := used + w.permits;
    granted := granted || w.token;
  END LOOP;
  RETURN granted;
END $$;

-- open starts a step: it takes the id's lock, reads the clock, locks the
-- id's row, frees an expired lease (every ended lease of a shared id),
-- purges up to p_limit dead waiters and hands off what is free (see
-- hand_off and shared_hand_off). head_before (the first row, live or dead)
-- is for finish; granted are the tokens it granted; cap is the id's
-- capacity (NULL: a mutex).
CREATE OR REPLACE FUNCTION {{s}}.open(p_id bytea, p_limit int, self bytea,
  OUT now_ts timestamptz, OUT head_before bytea, OUT granted bytea[], OUT cap bigint)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(('x' || substr(md5('{{s}}'::bytea || p_id), 1, 16))::bit(64)::bigint);
  now_ts := clock_timestamp();
  SELECT capacity INTO cap FROM {{s}}.ids WHERE id = p_id FOR UPDATE;
  head_before := {{s}}.head(p_id, '-infinity');
  IF cap IS NULL THEN
    UPDATE {{s}}.ids SET token = NULL WHERE id = p_id AND token IS NOT NULL AND expiry <= now_ts;
  ELSE
    DELETE FROM {{s}}.holders WHERE id = p_id AND expiry <= now_ts;
  END IF;
  DELETE FROM {{s}}.waiters WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.waiters
    WHERE id = p_id AND deadline <= now_ts ORDER BY deadline LIMIT p_limit));
  IF cap IS NULL THEN
    granted := ARRAY[{{s}}.hand_off(p_id, now_ts, self)];
  ELSE
    granted := {{s}}.shared_hand_off(p_id, now_ts, self, cap);
  END IF;
END $$;

-- finish ends a step on an id of capacity cap (NULL: a mutex): it hands off
-- what is free (see hand_off and shared_hand_off), and when the first row
-- of the queue changed while the id is held, it tells the live head
-- (unless it is self: the step's reply tells it) the holder's TTL (on a
-- shared id: of the lease that ends first), so that it keeps a timer for a
-- lease that ends without a release.
CREATE OR REPLACE FUNCTION {{s}}.finish(p_id bytea, now_ts timestamptz, head_before bytea, self bytea, cap bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  r {{s}}.ids;
  w {{s}}.waiters;
  first_end timestamptz;
BEGIN
  IF cap IS NULL THEN
    PERFORM {{s}}.hand_off(p_id, now_ts, self);
    SELECT * INTO r FROM {{s}}.ids WHERE id = p_id AND token IS NOT NULL;
    first_end := r.expiry;
  ELSE
    PERFORM {{s}}.shared_hand_off(p_id, now_ts, self, cap);
    SELECT min(expiry) INTO first_end FROM {{s}}.holders WHERE id = p_id AND expiry > now_ts;
  END IF;
  SELECT * INTO w FROM {{s}}.waiters WHERE id = p_id AND deadline > now_ts ORDER BY ticket LIMIT 1;
  IF first_end IS NOT NULL AND w.token IS NOT NULL AND w.token IS DISTINCT FROM self
      AND {{s}}.head(p_id, '-infinity') IS DISTINCT FROM head_before THEN
    PERFORM {{s}}.wake(w.channel, p_id, w.token, greatest(1, {{s}}.us(first_end - now_ts)), 0, 0, now_ts);
  END IF;
END $$;

-- sweep deletes up to p_limit rows idle for p_idle: counter rows whose fence
-- is behind the clock (their id's next fence is the clock, still higher),
-- long-dead waiters and long-ended leases of shared ids. It skips the rows
-- a step has locked.
CREATE OR REPLACE FUNCTION {{s}}.sweep(now_ts timestamptz, p_idle interval, p_limit int)
RETURNS void LANGUAGE sql AS $$
  DELETE FROM {{s}}.ids WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.ids WHERE expiry < now_ts - p_idle
    AND fence < {{s}}.us(now_ts - 'epoch') LIMIT p_limit FOR UPDATE SKIP LOCKED));
  DELETE FROM {{s}}.waiters WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.waiters
    WHERE deadline < now_ts - p_idle LIMIT p_limit FOR UPDATE SKIP LOCKED));
  DELETE FROM {{s}}.holders WHERE ctid = ANY (ARRAY(SELECT ctid FROM {{s}}.holders
    WHERE expiry < now_ts - p_idle LIMIT p_limit FOR UPDATE SKIP LOCKED));
$$;

-- acquire: the fair try-acquire with optional enqueue (checklist 1, 2, 7,
-- 14, 15). A waiter records the lease TTL and the permits it asks for and
-- p_channel, where its process listens. o_now is the server's clock
-- (Grant.StoreTime). p_cap is the capacity of a shared request (2 or more)
-- and p_permits its lease's permits; both NULL for a mutex. A request whose
-- capacity is not the id's while the id has a live lease or a live waiter
-- is refused with o_capacity (ErrCapacity); an idle id takes the request's.
CREATE OR REPLACE FUNCTION {{s}}.acquire(p_id bytea, p_token bytea, p_ttl bigint, p_wait bool,
  p_wttl bigint, p_max int, p_limit int, p_idle bigint, p_channel text, p_cap bigint, p_permits bigint,
  OUT o_acquired bool, OUT o_fence bigint, OUT o_ttl bigint, OUT o_holder_ttl bigint,
  OUT o_queued bool, OUT o_ticket bigint, OUT o_head bool, OUT o_full bool, OUT o_now bigint,
  OUT o_capacity bool)
LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, p_token);
  cap bigint := o.cap;
  r {{s}}.ids;
  l {{s}}.holders;
  w {{s}}.waiters;
  h bytea;
  first_end timestamptz;
BEGIN
  o_acquired := false; o_fence := 0; o_ttl := 0; o_holder_ttl := 0;
  o_queued := false; o_ticket := 0; o_head := false; o_full := false; o_capacity := false;
  o_now := {{s}}.us(o.now_ts - 'epoch');
  SELECT * INTO r FROM {{s}}.ids WHERE id = p_id;
  IF cap IS DISTINCT FROM p_cap THEN
    -- open freed an ended mutex lease: a token left is a live one.
    IF r.token IS NOT NULL OR EXISTS (SELECT FROM {{s}}.holders WHERE id = p_id AND expiry > o.now_ts)
        OR EXISTS (SELECT FROM {{s}}.waiters WHERE id = p_id AND deadline > o.now_ts) THEN
      o_capacity := true;
      PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, p_token, cap);
      RETURN;
    END IF;
    DELETE FROM {{s}}.holders WHERE id = p_id; -- ended leases only
    IF p_cap IS NULL THEN
      UPDATE {{s}}.ids SET capacity = NULL WHERE id = p_id;
    ELSE
      INSERT INTO {{s}}.ids (id, token, expiry, fence, capacity)
        VALUES (p_id, NULL, o.now_ts, {{s}}.us(o.now_ts - 'epoch'), p_cap)
        ON CONFLICT (id) DO UPDATE SET token = NULL, capacity = excluded.capacity;
    END IF;
    cap := p_cap;
  END IF;
  -- A dead entry the purge LIMIT left in place is never granted or refreshed.
  DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token AND deadline <= o.now_ts;
  SELECT * INTO w FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
  h := {{s}}.head(p_id, o.now_ts);
  IF cap IS NULL THEN
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
    END IF;
  ELSE -- a shared id: open deleted the ended leases
    SELECT * INTO l FROM {{s}}.holders WHERE id = p_id AND token = p_token;
    IF l.token IS NOT NULL THEN -- a retried grant
      o_acquired := true; o_fence := l.fence; o_ttl := {{s}}.us(l.expiry - o.now_ts);
    ELSIF (h IS NULL OR h = p_token) AND {{s}}.used(p_id, o.now_ts) + p_permits <= cap THEN
      DELETE FROM {{s}}.waiters WHERE id = p_id AND token = p_token;
      o_acquired := true; o_ttl := p_ttl;
      o_fence := {{s}}.share_to(p_id, p_token, p_ttl, p_permits, o.now_ts);
      IF r.id IS NULL THEN
        PERFORM {{s}}.sweep(o.now_ts, p_idle * interval '1 microsecond', 8);
      END IF;
    ELSE
      SELECT min(expiry) INTO first_end FROM {{s}}.holders WHERE id = p_id AND expiry > o.now_ts;
      o_holder_ttl := CASE WHEN first_end IS NULL THEN 0 ELSE greatest(1, {{s}}.us(first_end - o.now_ts)) END;
    END IF;
  END IF;
  IF NOT o_acquired THEN
    IF p_wait AND w.token IS NOT NULL THEN
      UPDATE {{s}}.waiters SET deadline = o.now_ts + p_wttl * interval '1 microsecond', ttl = p_ttl,
        channel = p_channel, permits = coalesce(p_permits, 0) WHERE id = p_id AND token = p_token;
    ELSIF p_wait AND (SELECT count(*) FROM {{s}}.waiters WHERE id = p_id AND deadline > o.now_ts) >= p_max THEN
      o_full := true;
    ELSIF p_wait THEN
      INSERT INTO {{s}}.waiters (id, ticket, token, deadline, ttl, channel, since, permits)
        VALUES (p_id, nextval('{{s}}.tickets'), p_token, o.now_ts + p_wttl * interval '1 microsecond',
        p_ttl, p_channel, o.now_ts, coalesce(p_permits, 0)) RETURNING * INTO w;
    END IF;
    IF w.token IS NOT NULL THEN
      o_queued := true; o_ticket := w.ticket; o_head := {{s}}.head(p_id, o.now_ts) = p_token;
    END IF;
  END IF;
  -- The next waiter, if a grant or a purge made it the head, is told.
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, p_token, cap);
END $$;

-- acquire with the signature of the versions before shared ids, so that
-- their processes keep working during a rolling upgrade: a mutex request,
-- which raises an exception (rolling the step back) where the id is shared.
CREATE OR REPLACE FUNCTION {{s}}.acquire(p_id bytea, p_token bytea, p_ttl bigint, p_wait bool,
  p_wttl bigint, p_max int, p_limit int, p_idle bigint, p_channel text,
  OUT o_acquired bool, OUT o_fence bigint, OUT o_ttl bigint, OUT o_holder_ttl bigint,
  OUT o_queued bool, OUT o_ticket bigint, OUT o_head bool, OUT o_full bool, OUT o_now bigint)
LANGUAGE plpgsql AS $$
DECLARE
  a record := {{s}}.acquire(p_id, p_token, p_ttl, p_wait, p_wttl, p_max, p_limit, p_idle, p_channel,
    NULL::bigint, NULL::bigint);
BEGIN
  IF a.o_capacity THEN
    RAISE EXCEPTION 'lock: the id is in use with another capacity';
  END IF;
  SELECT a.o_acquired, a.o_fence, a.o_ttl, a.o_holder_ttl, a.o_queued, a.o_ticket, a.o_head, a.o_full, a.o_now
    INTO o_acquired, o_fence, o_ttl, o_holder_ttl, o_queued, o_ticket, o_head, o_full, o_now;
END $$;

-- release: compare-and-delete, then hand off (checklist 3, 14, 15). The
-- token of the latest Release is kept, so that the same release sent again
-- (its reply lost) is answered true while the lock stays free (on a shared
-- id: until the next grant).
CREATE OR REPLACE FUNCTION {{s}}.release(p_id bytea, p_token bytea, p_limit int)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
  o record := {{s}}.open(p_id, p_limit, NULL);
  ok bool;
BEGIN
  IF o.cap IS NULL THEN
    UPDATE {{s}}.ids SET token = NULL, expiry = o.now_ts, released = p_token
      WHERE id = p_id AND token = p_token;
    ok := FOUND OR EXISTS (SELECT FROM {{s}}.ids WHERE id = p_id AND token IS NULL AND released = p_token);
  ELSE
    DELETE FROM {{s}}.holders WHERE id = p_id AND token = p_token;
    ok := FOUND;
    IF ok THEN -- the row's expiry is already at least the lease's
      UPDATE {{s}}.ids SET released = p_token WHERE id = p_id;
    ELSE
      ok := EXISTS (SELECT FROM {{s}}.ids WHERE id = p_id AND released = p_token);
    END IF;
  END IF;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL, o.cap);
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
  IF o.cap IS NULL THEN
    UPDATE {{s}}.ids SET expiry = o.now_ts + p_ttl * interval '1 microsecond'
      WHERE id = p_id AND token = p_token;
    ok := FOUND;
  ELSE
    UPDATE {{s}}.holders SET expiry = o.now_ts + p_ttl * interval '1 microsecond'
      WHERE id = p_id AND token = p_token;
    ok := FOUND;
    IF ok THEN
      UPDATE {{s}}.ids SET expiry = greatest(expiry, o.now_ts + p_ttl * interval '1 microsecond') WHERE id = p_id;
    END IF;
  END IF;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL, o.cap);
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
  IF o.cap IS NULL THEN
    UPDATE {{s}}.ids SET token = NULL, expiry = o.now_ts WHERE id = p_id AND token = p_token;
  ELSE
    DELETE FROM {{s}}.holders WHERE id = p_id AND token = p_token;
  END IF;
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL, o.cap);
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
  queued := FOUND OR coalesce(p_token = ANY (o.granted), false);
  PERFORM {{s}}.finish(p_id, o.now_ts, o.head_before, NULL, o.cap);
  RETURN queued;
END $$;

-- inspect: a read-only view of one id (no lock, no write): the live lease
-- and the live waiters, the first p_max of them listed head first; on a
-- shared id (o_cap, NULL for a mutex or an idle shared id) its live
-- leases, in fence order. PostgreSQL has no sha1(), so Go computes the
-- tokens' fingerprints.
CREATE OR REPLACE FUNCTION {{s}}.inspect(p_id bytea, p_max int, OUT o_fence bigint, OUT o_ttl bigint,
  OUT o_holder bytea, OUT o_len int, OUT o_tickets bigint[], OUT o_tokens bytea[], OUT o_since bigint[],
  OUT o_deadlines bigint[], OUT o_permits bigint[], OUT o_cap bigint, OUT o_hfences bigint[],
  OUT o_httls bigint[], OUT o_htokens bytea[], OUT o_hpermits bigint[])
LANGUAGE sql AS $$
  WITH n AS (SELECT clock_timestamp() AS t),
  w AS (SELECT q.* FROM {{s}}.waiters q, n WHERE id = p_id AND deadline > n.t),
  f AS (SELECT * FROM w ORDER BY ticket LIMIT p_max),
  c AS (SELECT capacity FROM {{s}}.ids WHERE id = p_id AND capacity IS NOT NULL),
  h AS (SELECT s.* FROM {{s}}.holders s, n WHERE EXISTS (SELECT FROM c) AND id = p_id AND expiry > n.t)
  SELECT l.fence, {{s}}.us(l.expiry - n.t), l.token, (SELECT count(*)::int FROM w),
    ARRAY(SELECT ticket FROM f ORDER BY ticket), ARRAY(SELECT token FROM f ORDER BY ticket),
    ARRAY(SELECT {{s}}.us(n.t - since) FROM f ORDER BY ticket),
    ARRAY(SELECT {{s}}.us(deadline - n.t) FROM f ORDER BY ticket),
    ARRAY(SELECT permits FROM f ORDER BY ticket),
    CASE WHEN EXISTS (SELECT FROM h) OR EXISTS (SELECT FROM w) THEN (SELECT capacity FROM c) END,
    ARRAY(SELECT fence FROM h ORDER BY fence), ARRAY(SELECT {{s}}.us(expiry - n.t) FROM h ORDER BY fence),
    ARRAY(SELECT token FROM h ORDER BY fence), ARRAY(SELECT permits FROM h ORDER BY fence)
  FROM n LEFT JOIN {{s}}.ids l ON l.id = p_id AND l.token IS NOT NULL AND l.expiry > n.t
$$;
