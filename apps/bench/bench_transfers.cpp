// Placeholder replaced by the transfer benchmarks (copies, kernel, managed prefetch).
namespace bench {
void register_transfer_benchmarks() {}
}  // namespace bench
