package cuda

// Operations of the C dispatcher mr_do in shim.h; the values must match
// its MR_OP_* enum (TestOpcodesMatchShim checks).
const (
	opInit = iota + 1
	opDriverVersion
	opDeviceCount
	opDeviceGet
	opTotalMem
	opAttribute
	opPrimaryRetain
	opPrimaryRelease
	// The operations from here on run with the device's context current.
	opCtxSync
	opMalloc
	opFree
	opMemInfo
	opGranularity
	opReserve
	opAddressFree
	opCreate
	opMap
	opSetAccess
	opUnmap
	opRelease
	opEventCreate
	opEventRecord
	opEventQuery
	opEventSync
	opEventDestroy
	opStreamSync
	opLast
)

// Which driver call of an operation failed (shim.h's MR_STEP_*): making the
// context current takes up to two calls before the operation's own.
const (
	stepGetCurrent = 1
	stepSetCurrent = 2
	stepCall       = 3
)

// opCalls names the driver entry point each operation calls, as libcuda
// exports it; errors name it.
var opCalls = [opLast]string{
	opInit:           "cuInit",
	opDriverVersion:  "cuDriverGetVersion",
	opDeviceCount:    "cuDeviceGetCount",
	opDeviceGet:      "cuDeviceGet",
	opTotalMem:       "cuDeviceTotalMem_v2",
	opAttribute:      "cuDeviceGetAttribute",
	opPrimaryRetain:  "cuDevicePrimaryCtxRetain",
	opPrimaryRelease: "cuDevicePrimaryCtxRelease_v2",
	opCtxSync:        "cuCtxSynchronize",
	opMalloc:         "cuMemAlloc_v2",
	opFree:           "cuMemFree_v2",
	opMemInfo:        "cuMemGetInfo_v2",
	opGranularity:    "cuMemGetAllocationGranularity",
	opReserve:        "cuMemAddressReserve",
	opAddressFree:    "cuMemAddressFree",
	opCreate:         "cuMemCreate",
	opMap:            "cuMemMap",
	opSetAccess:      "cuMemSetAccess",
	opUnmap:          "cuMemUnmap",
	opRelease:        "cuMemRelease",
	opEventCreate:    "cuEventCreate",
	opEventRecord:    "cuEventRecord",
	opEventQuery:     "cuEventQuery",
	opEventSync:      "cuEventSynchronize",
	opEventDestroy:   "cuEventDestroy_v2",
	opStreamSync:     "cuStreamSynchronize",
}

// callName is the entry point that failed in op at step.
func callName(op, step int) string {
	switch step {
	case stepGetCurrent:
		return "cuCtxGetCurrent"
	case stepSetCurrent:
		return "cuCtxSetCurrent"
	}
	if op > 0 && op < opLast {
		return opCalls[op]
	}
	return "unknown driver operation"
}
