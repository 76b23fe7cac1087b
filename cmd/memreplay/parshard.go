package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	simpar "github.com/memreplay/memreplay/sim/par"
	"github.com/memreplay/memreplay/sim/study"
)

// mergeFlags are the flags --merge takes: how to print. Everything that
// shapes the search comes from the parts.
var mergeFlags = []string{"merge", "format", "html", "no-color", "progress", "parallel"}

// checkShardFlags refuses what a partial result cannot carry.
func checkShardFlags(fs *pflag.FlagSet, shard, out, format string) error {
	if shard == "" {
		if out != "" {
			return usageError{fmt.Errorf("-o goes with --shard (the report itself goes to stdout)")}
		}
		return nil
	}
	if _, _, err := simpar.ParseShard(shard); err != nil {
		return usageError{fmt.Errorf("--shard %v", err)}
	}
	for _, f := range []string{"html", "limits", "limits-space"} {
		if fs.Changed(f) {
			return usageError{fmt.Errorf("--%s goes on the --merge command line, not on a shard's", f)}
		}
	}
	if fs.Changed("format") && format != "json" {
		return usageError{fmt.Errorf("--shard writes a partial result (JSON); --format %s goes with --merge", format)}
	}
	return nil
}

// runShard runs one shard and writes its partial result.
func runShard(o simpar.Options, shard, out string, stdout io.Writer) error {
	i, n, _ := simpar.ParseShard(shard)
	sh, err := simpar.RunShard(o, i, n)
	if err != nil {
		return err
	}
	b, err := json.Marshal(sh)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if out == "" {
		_, err = stdout.Write(b)
		return err
	}
	f, err := createOutFor("-o", out)
	if err != nil {
		return err
	}
	defer f.abort()
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.commit()
}

// parMerge prints the report of the parts named on the command line.
func parMerge(fs *pflag.FlagSet, stdout io.Writer, format, html string) error {
	var other []string
	fs.Visit(func(f *pflag.Flag) {
		if !slices.Contains(mergeFlags, f.Name) {
			other = append(other, "--"+f.Name)
		}
	})
	switch {
	case len(other) > 0:
		return usageError{fmt.Errorf("--merge takes the search from its parts: %s belongs on the shards' command line", strings.Join(other, ", "))}
	case fs.NArg() == 0:
		return usageError{fmt.Errorf("--merge needs the parts: memreplay par --merge part-*.json")}
	}
	if html != "" {
		if err := canWrite("--html", html); err != nil {
			return err
		}
	}
	var parts []*simpar.Shard
	for _, path := range fs.Args() {
		p, err := simpar.ReadShard(path)
		if err != nil {
			return inputError{err}
		}
		parts = append(parts, p)
	}
	rep, err := simpar.Merge(parts)
	if err != nil {
		return inputError{err}
	}
	return renderPar(stdout, rep, nil, format, html, "")
}

// spaceIdentity is the space's hash, for the shards' fingerprint: two
// machines with different space files under one name do not merge.
func spaceIdentity(space study.Space) (string, error) {
	b, err := json.Marshal(space)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return "space " + hex.EncodeToString(h[:8]), nil
}

// filesIdentity names the trace files by name and size.
func filesIdentity(paths []string) (string, error) {
	var ids []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		ids = append(ids, fmt.Sprintf("%s %d", p, st.Size()))
	}
	return strings.Join(ids, "\n"), nil
}
