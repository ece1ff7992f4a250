package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// passwordEnv is the environment variable that gives the password when
// neither -password nor -url does, so that it need not be on the command
// line.
const passwordEnv = "LOCKCTL_REDIS_PASSWORD"

// Client settings of a command-line tool: fail fast and say so, never
// resend a command (a forced release resent after a lost reply would be
// answered "not held", though the first one released the lock).
const (
	defaultTimeout     = 5 * time.Second
	defaultDialTimeout = 2 * time.Second
	dialAttempts       = 2                      // go-redis DialerRetries: attempts per dial
	dialBackoff        = 100 * time.Millisecond // between them (and after the last)
	poolSize           = 2
)

// connFlags are the connection flags as given.
type connFlags struct {
	url, addr, user, password, tlsCA string
	db                               int
	tls, tlsInsecure                 bool
	timeout, dialTimeout             time.Duration
	set                              map[string]bool // the flags given on the command line
}

// define defines the connection flags on fs.
func (f *connFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "", "Redis URL: redis://[user[:password]@]host[:port][/db], rediss://... for TLS")
	fs.StringVar(&f.addr, "addr", defaultAddr, "Redis address; several, comma-separated, for a cluster")
	fs.StringVar(&f.user, "user", "", "ACL user name")
	fs.StringVar(&f.password, "password", "", "password (default $"+passwordEnv+")")
	fs.IntVar(&f.db, "db", 0, "database number (one server only)")
	fs.BoolVar(&f.tls, "tls", false, "connect with TLS (with -addr)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM file of the CAs that verify the server's certificate (with TLS)")
	fs.BoolVar(&f.tlsInsecure, "tls-insecure", false, "do not verify the server's certificate (with TLS; testing only)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "bound of each Redis call, dial included")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", defaultDialTimeout, "bound of each attempt to connect")
}

// conn is where and how to connect: one server, or a cluster (several
// -addr).
type conn struct {
	single      *redis.Options
	cluster     *redis.ClusterOptions
	callTimeout time.Duration // -timeout: the bound of each call
}

// where names the server(s) in messages; never a password.
func (c conn) where() string {
	if c.cluster != nil {
		return strings.Join(c.cluster.Addrs, ",")
	}
	return c.single.Addr
}

// client returns a new client; the caller closes it.
func (c conn) client() redis.UniversalClient {
	if c.cluster != nil {
		return redis.NewClusterClient(c.cluster)
	}
	return redis.NewClient(c.single)
}

// parseConn checks the connection flags and returns the connection. Bad
// or contradictory flags are a usageError. getenv reads the environment.
func parseConn(f connFlags, getenv func(string) string) (conn, error) {
	switch {
	case f.timeout <= 0:
		return conn{}, usagef("-timeout must be positive, got %v", f.timeout)
	case f.dialTimeout <= 0:
		return conn{}, usagef("-dial-timeout must be positive, got %v", f.dialTimeout)
	case f.db < 0:
		return conn{}, usagef("-db must not be negative, got %d", f.db)
	case f.tlsCA != "" && f.tlsInsecure:
		return conn{}, usagef("-tls-ca and -tls-insecure contradict each other: verify with the CAs, or not at all")
	}
	c := conn{callTimeout: f.timeout}
	if f.set["url"] {
		for _, name := range []string{"addr", "user", "db", "tls"} {
			if f.set[name] {
				return conn{}, usagef("-%s and -url: give it in the URL (redis://user@host:port/db, rediss:// for TLS)", name)
			}
		}
		o, err := redis.ParseURL(f.url)
		if err != nil {
			return conn{}, usagef("-url: %s", urlError(err))
		}
		if o.Password != "" && f.set["password"] {
			return conn{}, usagef("-password and a password in -url: give one")
		}
		c.single = o
	} else {
		var addrs []string
		for _, a := range strings.Split(f.addr, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
				return conn{}, usagef("-addr %q is not host:port", a)
			}
			addrs = append(addrs, a)
		}
		switch {
		case len(addrs) == 0:
			return conn{}, usagef("-addr is empty")
		case len(addrs) > 1 && f.db != 0:
			return conn{}, usagef("-db %d with several -addr: a cluster has only database 0", f.db)
		}
		var tc *tls.Config
		if f.tls {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if len(addrs) == 1 {
			c.single = &redis.Options{Addr: addrs[0], Username: f.user, DB: f.db, TLSConfig: tc}
		} else {
			c.cluster = &redis.ClusterOptions{Addrs: addrs, Username: f.user, TLSConfig: tc}
		}
	}
	password := getenv(passwordEnv)
	if f.set["password"] {
		password = f.password
	}
	tc := c.tlsConfig()
	if (f.tlsCA != "" || f.tlsInsecure) && tc == nil {
		return conn{}, usagef("-tls-ca and -tls-insecure need TLS: -tls, or a rediss:// -url")
	}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return conn{}, usagef("-tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return conn{}, usagef("-tls-ca %s: no PEM certificate in it", f.tlsCA)
		}
		tc.RootCAs = pool
	}
	if f.tlsInsecure {
		tc.InsecureSkipVerify = true
	}
	if o := c.single; o != nil {
		if o.Password == "" {
			o.Password = password
		}
		o.DialTimeout = orDefault(o.DialTimeout, f.dialTimeout)
		o.ReadTimeout = orDefault(o.ReadTimeout, f.timeout)
		o.WriteTimeout = orDefault(o.WriteTimeout, f.timeout)
		o.MaxRetries = orDefault(o.MaxRetries, -1)
		o.PoolSize = orDefault(o.PoolSize, poolSize)
		o.DialerRetries, o.DialerRetryTimeout = dialAttempts, dialBackoff
		o.ContextTimeoutEnabled = true
	} else {
		o := c.cluster
		o.Password = password
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = f.dialTimeout, f.timeout, f.timeout
		o.MaxRetries, o.PoolSize = -1, poolSize
		o.DialerRetries, o.DialerRetryTimeout = dialAttempts, dialBackoff
		o.ContextTimeoutEnabled = true
	}
	return c, nil
}

// tlsConfig returns the connection's TLS configuration; nil without TLS.
func (c conn) tlsConfig() *tls.Config {
	if c.cluster != nil {
		return c.cluster.TLSConfig
	}
	return c.single.TLSConfig
}

// orDefault returns v, or d when v is zero (not given in the URL).
func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// urlError returns the text of an error of redis.ParseURL without the
// URL, which may hold a password.
func urlError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
}
