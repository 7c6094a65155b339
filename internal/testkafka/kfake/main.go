// Command kfake runs franz-go's kfake, a Kafka that speaks the real wire
// protocol, as a process of its own on loopback ports: the out-of-process
// Kafka for the tests of the queuebox binary (testkafka.NewProcess builds
// and drives it). When its brokers listen it prints one line of JSON on
// stdout,
//
//	{"brokers":["127.0.0.1:40111","127.0.0.1:40112"]}
//
// and on SIGTERM or SIGINT it closes the cluster (saving it to -data-dir,
// if set) and exits 0.
//
//	kfake -brokers 3 -partitions 6 -topics orders,invoices
//	kfake -ports 40111,40112 -data-dir /tmp/k   # again on the same ports, with the data
//
// Flags:
//
//	-brokers n      brokers to run (default 1; with -ports, one per port)
//	-ports p,q      the brokers' ports, so that a restart comes back on the
//	                same addresses (default: free ports)
//	-partitions n   partitions of the seeded topics and of topics created
//	                with -1 partitions (default: kfake's, 10)
//	-topics a,b     topics to create at start (not when -data-dir holds a
//	                saved cluster, which has its own)
//	-data-dir dir   keep the topics and records there across restarts
//	-watch-stdin    exit, as on SIGTERM, when stdin reaches its end: a
//	                parent that holds a pipe to it and dies takes the
//	                cluster with it
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kfake", flag.ContinueOnError)
	brokers := fs.Int("brokers", 0, "brokers to run (default 1; with -ports, one per port)")
	ports := fs.String("ports", "", "comma-separated ports of the brokers (default: free ports)")
	partitions := fs.Int("partitions", 0, "partitions of the seeded topics (default: kfake's)")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	dataDir := fs.String("data-dir", "", "folder that keeps the cluster across restarts")
	watchStdin := fs.Bool("watch-stdin", false, "exit when stdin reaches its end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	var portList []int
	for _, s := range split(*ports) {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 || p > 65535 {
			return fmt.Errorf("-ports: bad port %q", s)
		}
		portList = append(portList, p)
	}
	n := *brokers
	switch {
	case n == 0 && len(portList) > 0:
		n = len(portList)
	case n == 0:
		n = 1
	case n < 0 || (len(portList) > 0 && len(portList) != n):
		return fmt.Errorf("-brokers %d with %d ports", n, len(portList))
	}

	opts := []kfake.Opt{kfake.NumBrokers(n)}
	if len(portList) > 0 {
		opts = append(opts, kfake.Ports(portList...))
	}
	if *partitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(*partitions))
	}
	if ts := split(*topics); len(ts) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), ts...))
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}

	// Signals are caught before the line that tells the parent it may
	// signal.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	line, err := json.Marshal(struct {
		Brokers []string `json:"brokers"`
	}{c.ListenAddrs()})
	if err != nil {
		return err
	}
	if _, err := fmt.Printf("%s\n", line); err != nil {
		return err
	}
	if *watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop <- syscall.SIGTERM
		}()
	}
	<-stop
	return nil
}

// split splits a comma-separated list, dropping empty items.
func split(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
