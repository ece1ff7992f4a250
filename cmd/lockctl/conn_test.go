package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// env returns a getenv that knows only the password variable, set to pw
// ("" for unset).
func envPassword(pw string) func(string) string {
	return func(name string) string {
		if name == passwordEnv {
			return pw
		}
		return ""
	}
}

// writeCA writes a new self-signed certificate for 127.0.0.1 and
// localhost, which is its own CA, and its key, as PEM files in dir
// (redisserver.WriteCA).
func writeCA(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := redisserver.WriteCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// The connection flags and the password variable make the client options
// they say; lockctl's own settings (timeouts, no resends) apply to every
// form.
func TestConnFlags(t *testing.T) {
	ca, _ := writeCA(t, t.TempDir())
	// common checks the settings every connection gets, with the default
	// timeouts unless said otherwise.
	common := func(t *testing.T, c conn) {
		t.Helper()
		if c.callTimeout != defaultTimeout {
			t.Errorf("call timeout %v, want %v", c.callTimeout, defaultTimeout)
		}
		if o := c.single; o != nil && (o.MaxRetries != -1 || o.DialerRetries != dialAttempts || !o.ContextTimeoutEnabled || o.PoolSize != poolSize) {
			t.Errorf("client settings: MaxRetries %d, DialerRetries %d, ContextTimeoutEnabled %v, PoolSize %d", o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled, o.PoolSize)
		}
		if o := c.cluster; o != nil && (o.MaxRetries != -1 || o.DialerRetries != dialAttempts || !o.ContextTimeoutEnabled || o.PoolSize != poolSize) {
			t.Errorf("cluster client settings: MaxRetries %d, DialerRetries %d, ContextTimeoutEnabled %v, PoolSize %d", o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled, o.PoolSize)
		}
	}
	// single checks a one-server connection.
	single := func(addr, user, password string, db int, tlsOn bool) func(*testing.T, setup) {
		return func(t *testing.T, su setup) {
			t.Helper()
			common(t, su.conn)
			o := su.conn.single
			if o == nil {
				t.Fatal("a cluster connection, want one server")
			}
			if o.Addr != addr || o.Username != user || o.Password != password || o.DB != db || (o.TLSConfig != nil) != tlsOn {
				t.Fatalf("addr %q user %q password %q db %d TLS %v; want %q %q %q %d %v",
					o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil, addr, user, password, db, tlsOn)
			}
			if o.DialTimeout != defaultDialTimeout || o.ReadTimeout != defaultTimeout || o.WriteTimeout != defaultTimeout {
				t.Fatalf("timeouts dial %v read %v write %v", o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		args  []string
		env   string
		check func(*testing.T, setup)
	}{
		{"defaults", nil, "", single("localhost:6379", "", "", 0, false)},
		{"url", []string{"-url", "redis://alice:pw@h:7000/3"}, "", single("h:7000", "alice", "pw", 3, false)},
		{"url password beats env", []string{"-url", "redis://alice:pw@h:7000/3"}, "envpw", single("h:7000", "alice", "pw", 3, false)},
		{"url user, env password", []string{"-url", "redis://alice@h/2"}, "envpw", single("h:6379", "alice", "envpw", 2, false)},
		{"url, -password beats env", []string{"-url", "redis://h", "-password", "flagpw"}, "envpw", single("h:6379", "", "flagpw", 0, false)},
		{"rediss", []string{"-url", "rediss://h:7000"}, "", func(t *testing.T, su setup) {
			single("h:7000", "", "", 0, true)(t, su)
			tc := su.conn.single.TLSConfig
			if tc.ServerName != "h" || tc.RootCAs != nil || tc.InsecureSkipVerify || tc.MinVersion < tls.VersionTLS12 {
				t.Fatalf("TLS config %+v, want server name h, system CAs, verified", tc)
			}
		}},
		{"rediss with CA", []string{"-url", "rediss://h", "-tls-ca", ca}, "", func(t *testing.T, su setup) {
			single("h:6379", "", "", 0, true)(t, su)
			if su.conn.single.TLSConfig.RootCAs == nil {
				t.Fatal("-tls-ca set no RootCAs")
			}
		}},
		{"rediss insecure", []string{"-url", "rediss://h", "-tls-insecure"}, "", func(t *testing.T, su setup) {
			single("h:6379", "", "", 0, true)(t, su)
			if !su.conn.single.TLSConfig.InsecureSkipVerify {
				t.Fatal("-tls-insecure did not skip verification")
			}
		}},
		{"pieces", []string{"-addr", "h:1", "-user", "bob", "-password", "p", "-db", "4", "-tls"}, "envpw", func(t *testing.T, su setup) {
			single("h:1", "bob", "p", 4, true)(t, su)
			if tc := su.conn.single.TLSConfig; tc.MinVersion < tls.VersionTLS12 || tc.InsecureSkipVerify {
				t.Fatalf("TLS config %+v", tc)
			}
		}},
		{"pieces, env password", []string{"-addr", "h:1", "-user", "bob"}, "envpw", single("h:1", "bob", "envpw", 0, false)},
		{"empty -password beats env", []string{"-addr", "h:1", "-password", ""}, "envpw", single("h:1", "", "", 0, false)},
		{"cluster", []string{"-addr", "a:1, b:2", "-user", "u", "-tls", "-tls-ca", ca}, "envpw", func(t *testing.T, su setup) {
			common(t, su.conn)
			o := su.conn.cluster
			if o == nil || strings.Join(o.Addrs, " ") != "a:1 b:2" || o.Username != "u" || o.Password != "envpw" || o.TLSConfig == nil || o.TLSConfig.RootCAs == nil {
				t.Fatalf("cluster options %+v", o)
			}
			if su.conn.where() != "a:1,b:2" {
				t.Fatalf("where %q", su.conn.where())
			}
		}},
		{"timeouts", []string{"-timeout", "1s", "-dial-timeout", "300ms"}, "", func(t *testing.T, su setup) {
			o := su.conn.single
			if su.conn.callTimeout != time.Second || o.ReadTimeout != time.Second || o.WriteTimeout != time.Second || o.DialTimeout != 300*time.Millisecond {
				t.Fatalf("call %v read %v write %v dial %v", su.conn.callTimeout, o.ReadTimeout, o.WriteTimeout, o.DialTimeout)
			}
		}},
		{"url timeouts win", []string{"-url", "redis://h?dial_timeout=7s"}, "", func(t *testing.T, su setup) {
			if o := su.conn.single; o.DialTimeout != 7*time.Second || o.ReadTimeout != defaultTimeout {
				t.Fatalf("dial %v read %v", o.DialTimeout, o.ReadTimeout)
			}
		}},
		{"prefix and sharded", []string{"-prefix", "app:", "-sharded"}, "", func(t *testing.T, su setup) {
			want, _ := keys.New("app:")
			if su.ks.Prefix() != want.Prefix() || !su.sharded {
				t.Fatalf("prefix %q sharded %v", su.ks.Prefix(), su.sharded)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			su, rest, err := parseGlobal(append(tc.args, "inspect", "x"), envPassword(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(rest, " ") != "inspect x" {
				t.Fatalf("command %q", rest)
			}
			tc.check(t, su)
		})
	}
}

// Bad or contradictory connection flags are usage errors: exit 2, one
// line naming the flag, nothing sent (the address is never dialled), and
// never the password of a URL.
func TestConnUsageErrors(t *testing.T) {
	dir := t.TempDir()
	ca, _ := writeCA(t, dir)
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-url", "redis://h:1", "-addr", "h:2"}, "-addr and -url"},
		{[]string{"-url", "redis://h:1", "-user", "u"}, "-user and -url"},
		{[]string{"-url", "redis://h:1", "-db", "2"}, "-db and -url"},
		{[]string{"-url", "redis://h:1", "-tls"}, "-tls and -url"},
		{[]string{"-url", "redis://u:s3cret@h:1", "-password", "x"}, "-password and a password in -url"},
		{[]string{"-url", "http://h:1"}, "invalid URL scheme"},
		{[]string{"-url", "redis://h:1/x"}, "invalid database number"},
		{[]string{"-url", "redis://h:1?bogus=1"}, "bogus"},
		{[]string{"-url", "redis://u:s3cret@h:bad"}, "-url"},
		{[]string{"-url", "redis://h:1", "-tls-insecure"}, "need TLS"},
		{[]string{"-addr", "h"}, "not host:port"},
		{[]string{"-addr", ":1"}, "not host:port"},
		{[]string{"-addr", " , "}, "-addr is empty"},
		{[]string{"-addr", "a:1,b:2", "-db", "1"}, "cluster"},
		{[]string{"-db", "-1"}, "-db"},
		{[]string{"-db", "x"}, "-db"},
		{[]string{"-tls-ca", ca}, "need TLS"},
		{[]string{"-tls-insecure"}, "need TLS"},
		{[]string{"-tls", "-tls-ca", ca, "-tls-insecure"}, "contradict"},
		{[]string{"-tls", "-tls-ca", filepath.Join(dir, "missing.pem")}, "-tls-ca"},
		{[]string{"-tls", "-tls-ca", empty}, "no PEM certificate"},
		{[]string{"-timeout", "0s"}, "-timeout"},
		{[]string{"-dial-timeout", "-1s"}, "-dial-timeout"},
	} {
		var out, errOut bytes.Buffer
		code := runEnv(context.Background(), append(tc.args, "inspect", "x"), envPassword("envpw"), &out, &errOut)
		if code != 2 || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("lockctl %q: exit %d, stderr %q, stdout %q; want 2 and one line with %q", tc.args, code, errOut.String(), out.String(), tc.want)
		}
		if strings.Contains(errOut.String(), "s3cret") {
			t.Errorf("lockctl %q printed the URL's password: %q", tc.args, errOut.String())
		}
	}
}

// secureServer is a private redis-server with an ACL user, a password on
// the default user, a TLS port, and one held lock.
type secureServer struct {
	addr, tlsAddr, ca, prefix, id string
}

func startSecure(t *testing.T) secureServer {
	t.Helper()
	dir := t.TempDir()
	cert, key := writeCA(t, dir)
	tlsPort, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := redisserver.StartT(t, redisserver.Options{Dir: dir, Args: []string{
		"--tls-port", fmt.Sprint(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no",
	}})
	ss := secureServer{addr: s.Addr, tlsAddr: fmt.Sprintf("127.0.0.1:%d", tlsPort), ca: cert, prefix: "app:", id: "job"}
	ks, _ := keys.New(ss.prefix)
	for _, cmd := range [][]string{
		{"SET", ks.For(ss.id).Lock, "holder-token", "PX", "60000"},
		{"ACL", "SETUSER", "alice", "on", ">s3cret", "~*", "&*", "+@all"},
		{"CONFIG", "SET", "requirepass", "pw0"}, // last: Command cannot log in
	} {
		if reply, err := s.Do(cmd...); err != nil || strings.HasPrefix(reply, "-") {
			t.Fatalf("%q: %q, %v", cmd, reply, err)
		}
	}
	return ss
}

// Logins and TLS against a real server: the password from the URL, the
// flag or the environment; TLS by rediss:// or -tls, verified with
// -tls-ca; a refused login and an unverified certificate are one clear
// line and exit 1.
func TestSecureServer(t *testing.T) {
	ss := startSecure(t)
	rediss := "rediss://alice@" + ss.tlsAddr
	for _, tc := range []struct {
		name string
		args []string
		env  string
		code int
		want string // in stdout for exit 0, in stderr otherwise
	}{
		{"user, env password", []string{"-addr", ss.addr, "-user", "alice"}, "s3cret", 0, "held:    yes"},
		{"url with password", []string{"-url", "redis://alice:s3cret@" + ss.addr}, "", 0, "held:    yes"},
		{"url, env password", []string{"-url", "redis://alice@" + ss.addr}, "s3cret", 0, "held:    yes"},
		{"default user, -password", []string{"-addr", ss.addr, "-password", "pw0"}, "", 0, "held:    yes"},
		{"no password", []string{"-addr", ss.addr}, "", 1, "login refused"},
		{"wrong password", []string{"-addr", ss.addr, "-user", "alice", "-password", "wrong"}, "", 1, "login refused"},
		{"rediss, CA", []string{"-url", rediss, "-tls-ca", ss.ca}, "s3cret", 0, "held:    yes"},
		{"-tls, CA", []string{"-addr", ss.tlsAddr, "-tls", "-tls-ca", ss.ca, "-user", "alice"}, "s3cret", 0, "held:    yes"},
		{"rediss, insecure", []string{"-url", rediss, "-tls-insecure"}, "s3cret", 0, "held:    yes"},
		{"rediss, unknown CA", []string{"-url", rediss}, "s3cret", 1, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append(tc.args, "-prefix", ss.prefix, "inspect", ss.id)
			code := runEnv(context.Background(), args, envPassword(tc.env), &out, &errOut)
			got := out.String()
			if tc.code != 0 {
				got = errOut.String()
				if strings.Count(got, "\n") != 1 || out.Len() != 0 {
					t.Errorf("stdout %q, stderr %q: want one line on stderr only", out.String(), got)
				}
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q", code, out.String(), errOut.String(), tc.code, tc.want)
			}
			if strings.Contains(errOut.String(), "s3cret") {
				t.Fatalf("stderr shows the password: %q", errOut.String())
			}
		})
	}
	// The command reads the password from its environment.
	cmd := exec.Command(os.Args[0], "-addr", ss.addr, "-user", "alice", "-prefix", ss.prefix, "inspect", ss.id)
	cmd.Env = append(childEnv(), passwordEnv+"=s3cret")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("with %s in the environment: exit %d, %s", passwordEnv, ee.ExitCode(), ee.Stderr)
	} else if err != nil || !strings.Contains(string(out), "held:    yes") {
		t.Fatalf("with %s in the environment: %v, %q", passwordEnv, err, out)
	}
}
