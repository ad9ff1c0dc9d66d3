# fastd: forwards to objs/Makefile, which ./configure writes (run with no
# options here when it is missing). Options: ./configure --help.

TARGETS = build tests test install fuzz fuzz-build

default: build

# "make -j2 build tests" must not run two sub-makes at once: each would
# re-run configure when auto/ changed, writing objs/ together. Each
# sub-make still runs its own jobs in parallel.
.NOTPARALLEL:

$(TARGETS): objs/Makefile
	$(MAKE) -f objs/Makefile $@

objs/Makefile:
	./configure

clean:
	rm -rf objs

.PHONY: default clean $(TARGETS)
