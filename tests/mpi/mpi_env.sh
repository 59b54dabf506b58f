# The Open MPI environment every multi-process test runs in (sourced): as
# root too (CI runs as root; Open MPI refuses root unless told),
# oversubscribed (a 2-core machine holds 3 processes of several devices),
# loopback only (the shared-memory and TCP transports on this host, no
# probing of other interfaces).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# meson sets MALLOC_PERTURB_ for every test; Open MPI 4.1's mpirun itself
# then crashes (SIGSEGV) in its abort path now and then. The ranks -- our
# code -- still get it, forwarded by Open MPI; mpirun runs without.
if [ -n "${MALLOC_PERTURB_:-}" ]; then
  export OMPI_MCA_mca_base_env_list="MALLOC_PERTURB_=$MALLOC_PERTURB_"
  unset MALLOC_PERTURB_
fi
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
