/* Put MKL on its Intel code path on an AMD CPU, for `make test-rounding`.
 *
 * MKL (linked into PyTorch's x86-64 wheels; among other things it does their float32 matrix
 * products) checks the CPU's vendor as well as its instructions: on an AMD CPU it takes another
 * code path than on an Intel CPU with the same instructions, and the two round differently.
 * MKL asks these two functions whether the CPU is an Intel one; preloaded (LD_PRELOAD, Linux
 * only), this file answers yes. MKL still chooses the instruction set from what the CPU reports,
 * so an AMD CPU takes the path an Intel CPU with the same instructions would take (checked on
 * an AMD EPYC with AVX-512: `MKL_VERBOSE=1` names the path in its first line). Intel CPUs of
 * other generations (AVX2 only, or with AMX) take other paths still, which this cannot show.
 */
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
