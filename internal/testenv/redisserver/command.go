package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Command sends one command to addr on a new connection and returns the
// first line of the reply, without its CRLF. It needs no client library,
// so that the launcher does not depend on one.
func Command(addr string, args ...string) (string, error) {
	return command(func() (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }, args...)
}

// command sends one command on a connection of dial, as Command does.
func command(dial func() (net.Conn, error), args ...string) (string, error) {
	c, err := dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// Ping sends PING to addr and expects PONG.
func Ping(addr string) error { return pong(Command(addr, "PING")) }

// pong returns nil for the reply PONG, else an error.
func pong(line string, err error) error {
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return errors.New("PING answered " + line)
	}
	return nil
}
