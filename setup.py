"""Packaging for vgi_lit, driven by settings.ini (the nbdev 2 layout)."""
from configparser import ConfigParser
import setuptools, shlex

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['Planning', 'Pre-Alpha', 'Alpha', 'Beta', 'Production/Stable', 'Mature', 'Inactive']
lic = licenses[cfg['license']]

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
# optional extras: `pip install vgi_lit[sklearn]` (estimators), `vgi_lit[dask]` (out-of-core data)
extras = {'dev': dev_requirements,
          'sklearn': shlex.split(cfg.get('sklearn_requirements', '')),
          'dask': shlex.split(cfg.get('dask_requirements', ''))}

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'License :: ' + lic[1],
                 'Natural Language :: ' + cfg['language'].title(),
                 'Programming Language :: Python :: 3'],
    url=cfg['git_url'],
    project_urls={'Documentation': cfg['doc_host'] + cfg['doc_baseurl'], 'Source': cfg['git_url']},
    description=cfg['description'],
    keywords=cfg['keywords'],
    author=cfg['author'],
    author_email=cfg['author_email'],
    packages=setuptools.find_packages(include=['vgi_lit', 'vgi_lit.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require=extras,
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': ['vgi-lit=vgi_lit.apps.cli:main'], 'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
)
