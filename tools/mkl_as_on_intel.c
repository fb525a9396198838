/* Make MKL take the code path it takes on an Intel CPU, for `make test-rounding` on AMD.
 *
 * MKL (linked into PyTorch's x86-64 wheels, where it does float32 matrix products) picks its
 * kernels by CPU vendor: on an AMD CPU it runs other kernels than on an Intel CPU with the same
 * instructions, and they round differently. MKL asks these two functions whether the CPU is an
 * Intel one; loaded first (LD_PRELOAD), this file answers yes, so an AMD machine with AVX-512
 * runs the kernels an Intel one would. `MKL_VERBOSE=1` shows the path taken in its first line.
 * On an Intel CPU it changes nothing; the CPU must have the instructions those kernels use.
 */
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
