"""The sandbox that candidate code runs in: the policy applied to a child (:mod:`.policy`), the
compiler run on untrusted source (:mod:`.toolchain`), spawning, work directories and the disk watch
(:mod:`.spawn`), the fork server (:mod:`.forkserver`), the child's request protocol and runners
(:mod:`.child_request`, :mod:`.child`, :mod:`.cuda_child`), guarded buffers (:mod:`.guard_pages`)
and the child-side isolation: namespaces, privilege drop, Landlock, seccomp (:mod:`.isolation`)."""
