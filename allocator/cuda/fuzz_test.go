package cuda

// FuzzDeviceCalls drives the Device with arbitrary calls, arguments
// included: stale and foreign addresses, misaligned and huge sizes,
// unknown handles, double frees, events of other streams. Whatever the
// sequence, every call must come back (no crash in the shim or the fake),
// every failure must be a DeviceError naming the call and CUDA's error, and
// closing the device must leave nothing behind in the driver.

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/memreplay/memreplay/allocator"
)

func FuzzDeviceCalls(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 4, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0,
		6, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{10, 3, 0, 0, 0, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fk := needFake(t, 256<<20, 0, 0)
		d, err := fk.drv.Device(0)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []uint64 // everything the device handed out, live or not
		var pages []allocator.PageHandle
		var events []allocator.Event
		pick := func(v uint64) uint64 {
			if len(addrs) == 0 || v%4 == 0 {
				return v
			}
			return addrs[v%uint64(len(addrs))] + (v>>8)%4*(2<<20)
		}
		for len(data) >= 9 {
			op, v := data[0]%13, binary.LittleEndian.Uint64(data[1:9])
			data = data[9:]
			size := (v%64 + 1) * (1 << 20) // 1..64 MiB, often not a page multiple
			if v>>63 == 1 {
				size = v // anything at all
			}
			var err error
			switch op {
			case 0:
				var p uint64
				if p, err = d.Malloc(size); err == nil {
					addrs = append(addrs, p)
				}
			case 1:
				err = d.Free(pick(v))
			case 2:
				_, _, err = d.MemGetInfo()
			case 3:
				var r uint64
				if r, err = d.ReserveAddress(size); err == nil {
					addrs = append(addrs, r)
				}
			case 4:
				var h allocator.PageHandle
				if h, err = d.CreatePage(size); err == nil {
					pages = append(pages, h)
				}
			case 5:
				if len(pages) > 0 {
					err = d.Map(pick(v), pages[v%uint64(len(pages))])
				} else {
					err = d.Map(pick(v), allocator.PageHandle(v))
				}
			case 6:
				err = d.SetAccess(pick(v), size)
			case 7:
				err = d.Unmap(pick(v), size)
			case 8:
				if len(pages) > 0 {
					err = d.Release(pages[v%uint64(len(pages))])
				} else {
					err = d.Release(allocator.PageHandle(v))
				}
			case 9:
				err = d.FreeAddress(pick(v), size)
			case 10:
				var e allocator.Event
				if e, err = d.RecordEvent(allocator.Stream(v % 4)); err == nil {
					events = append(events, e)
				}
			case 11:
				if len(events) > 0 {
					i := v % uint64(len(events))
					if v%2 == 0 {
						_, err = d.QueryEvent(events[i])
					} else {
						err = d.SynchronizeEvent(events[i])
					}
					events = append(events[:i], events[i+1:]...) // a used event is the pool's again
				}
			case 12:
				err = d.SynchronizeStream(allocator.Stream(v % 4))
			}
			if err == nil {
				continue
			}
			var de *allocator.DeviceError
			if errors.As(err, &de) {
				if de.Call == "" || !strings.HasPrefix(de.Name, "CUDA_ERROR_") || de.Sticky {
					t.Fatalf("op %d: malformed or sticky device error %q", op, err)
				}
			} else if !strings.Contains(err.Error(), "was not created by device") {
				t.Fatalf("op %d: %v is not a device error", op, err)
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if n := fk.stat("live"); n != 0 {
			t.Fatalf("%d driver objects outlive the context", n)
		}
	})
}
