# SPDX-License-Identifier: MIT
# bash completion for sema: verbs, then each verb's options (read from its --help, so the
# completion never disagrees with the program); the global options before the verb too.
# Installed by `make install`.
_sema() {
    local cur verb="" i opts
    cur=${COMP_WORDS[COMP_CWORD]}
    # the verb: the first word that is neither a global option nor the value of one
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        -s | --server | --cacert | --cert | --cert-key) ((i++)) ;;
        -*) ;;
        *)
            verb=${COMP_WORDS[i]}
            break
            ;;
        esac
    done
    if [ -z "$verb" ]; then
        if [[ $cur == -* ]]; then
            opts=$(sema --help 2>/dev/null | sed -n '/^global options/,/^$/p')
            COMPREPLY=($(compgen -W "$(grep -o -- '--[a-z][a-z0-9-]*' <<<"$opts" | sort -u) --help --version" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(sema help 2>/dev/null | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p' | sort -u)" -- "$cur"))
        fi
        return
    fi
    case $cur in
    -*)
        if [[ " ${COMP_WORDS[*]} " == *" --local "* ]]; then
            opts=$(sema "$verb" --local --help 2>/dev/null)
        else
            opts=$(sema "$verb" --help 2>/dev/null)
        fi
        COMPREPLY=($(compgen -W "$(grep -o -- '--[a-z][a-z0-9-]*' <<<"$opts" | sort -u) --local --help" -- "$cur"))
        ;;
    *)
        COMPREPLY=($(compgen -f -- "$cur"))
        ;;
    esac
}
complete -F _sema sema
