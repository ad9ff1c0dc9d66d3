# fastd: forwards to objs/Makefile, which ./configure writes (run with no
# options here when it is missing). Options: ./configure --help.

TARGETS = build tests test install fuzz fuzz-build

default: build

$(TARGETS): objs/Makefile
	$(MAKE) -f objs/Makefile $@

objs/Makefile:
	./configure

clean:
	rm -rf objs

.PHONY: default clean $(TARGETS)
