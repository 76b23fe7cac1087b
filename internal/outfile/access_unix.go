//go:build unix

package outfile

import "syscall"

// canWrite asks the kernel whether this user may open path for writing
// (access(2) with W_OK): the bits of another owner or group, ACLs and
// read-only mounts. Root passes it for any file; checkExisting tests the
// bits first for that reason.
func canWrite(path string) bool {
	const wOK = 2
	return syscall.Access(path, wOK) == nil
}
