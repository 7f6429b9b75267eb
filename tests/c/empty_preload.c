/* An empty shared object for LD_PRELOAD: what any preload costs a fork (one more object's
 * mappings and relocated pages), the floor under the shim's figure in benches/fork.rs. */
int mallocshim_empty_preload(void)
{
    return 0;
}
