package config

// Environment variables PyTorch reads its settings from.
const (
	EnvAllocConf     = "PYTORCH_ALLOC_CONF"
	EnvCudaAllocConf = "PYTORCH_CUDA_ALLOC_CONF" // deprecated alias since 2.9
	EnvHipAllocConf  = "PYTORCH_HIP_ALLOC_CONF"  // deprecated alias since 2.9
)

// FromEnv builds the settings a PyTorch 2.9 CUDA process would start with,
// in the new dialect. lookup is os.LookupEnv or a stand-in; a variable set
// to "" counts as set.
//
// PyTorch 2.9 reads the environment twice. The device-independent parser
// takes the first of PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF and
// PYTORCH_HIP_ALLOC_CONF that is set (warning "<var> is deprecated, use
// PYTORCH_ALLOC_CONF instead" for the last two); that variable goes in
// EnvVar and its value in Source. The CUDA parser takes
// PYTORCH_CUDA_ALLOC_CONF before PYTORCH_ALLOC_CONF (and never the HIP one
// in a CUDA build), so when both are set with different values the CUDA
// options (backend, release_lock_on_cudamalloc, pinned_*,
// per_process_memory_fraction, ...) come from PYTORCH_CUDA_ALLOC_CONF, and
// the key check only looks at that string. FromEnv does the same.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	var generic, device *string
	envVar := ""
	for _, name := range []string{EnvAllocConf, EnvCudaAllocConf, EnvHipAllocConf} {
		if v, ok := lookup(name); ok {
			generic, envVar = &v, name
			break
		}
	}
	for _, name := range []string{EnvCudaAllocConf, EnvAllocConf} {
		if v, ok := lookup(name); ok {
			device = &v
			break
		}
	}
	if generic == nil && device == nil {
		return c, nil
	}
	// On error c is still the defaults, with EnvVar naming the culprit.
	err := c.apply(generic, device)
	c.EnvVar = envVar
	return c, err
}
